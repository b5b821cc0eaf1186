"""Validate and coerce ``@intune`` attributes.

Attributes arrive as Python values from the decorator, as strings or JSON from
``--with intune:budget_s=30`` and on remote runs: everything is coerced here, once,
and any problem becomes an :class:`IntuneAttributeError` naming the attribute and the fix.

Two kinds of value are known only when the task runs: a flow ``Parameter`` (e.g.
``@intune(budget_s=budget)`` with ``budget = Parameter(...)`` in the class body) and a
callable ``pipeline_kwargs=lambda flow: {"files": flow.files}``. At flow build they are
checked with the Parameter's default (and ``{}``); :func:`resolve` substitutes the
run's values on the task.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping

from ..errors import CacheError, IntuneError, PipelineError
from ..reference import FactorySource, check_arguments, check_reference
from ..resources import parse_bytes

DEFAULTS: dict[str, Any] = {
    "pipeline": None,
    "budget_s": 60.0,
    "cache": None,
    "cpu_budget": None,
    "ram_budget": None,
    "strict": False,
    "method": "intune",
    "window_s": None,
    "timeout_s": None,
    "pipeline_kwargs": None,
}

_REF = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")
_TRUE = {"true", "1", "yes", "on", "y", "t"}
_FALSE = {"false", "0", "no", "off", "n", "f", "", "none"}


class IntuneAttributeError(IntuneError):
    """An ``@intune`` attribute is missing, malformed or out of range."""


@dataclass
class Settings:
    """The coerced attributes of one ``@intune`` decorator."""

    pipeline: str | Callable
    budget_s: float = 60.0
    cache: str | None = None
    cpu_budget: float | None = None
    ram_budget: int | None = None
    strict: bool = False
    method: str = "intune"
    window_s: float | None = None
    timeout_s: float | None = None
    pipeline_kwargs: dict = field(default_factory=dict)

    @property
    def pipeline_name(self) -> str:
        if isinstance(self.pipeline, str):
            return self.pipeline
        return f"{getattr(self.pipeline, '__module__', '?')}:{getattr(self.pipeline, '__qualname__', '?')}"

    def to_dict(self) -> dict:
        out = asdict(self)
        out["pipeline"] = self.pipeline_name
        return out


def _blank(value) -> bool:
    return value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "null"))


def _number(name: str, value, *, allow_zero: bool) -> float:
    if isinstance(value, bool):
        raise IntuneAttributeError(f"@intune {name}={value!r} is not a number; give seconds, e.g. {name}=30")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise IntuneAttributeError(
            f"@intune {name}={value!r} is not a number; give seconds, e.g. {name}=30") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise IntuneAttributeError(f"@intune {name}={value!r} must be finite")
    if number < 0 or (number == 0 and not allow_zero):
        bound = "zero or more" if allow_zero else "greater than zero"
        raise IntuneAttributeError(f"@intune {name}={value!r} must be {bound}")
    return number


def _bool(name: str, value) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise IntuneAttributeError(f"@intune {name}={value!r} is not a boolean; use True or False")


def check_pipeline(value) -> tuple[str | Callable, FactorySource | None]:
    """A ``"module:attr"`` string whose module can be found, or a callable factory, with the
    module's source view (None for a callable) for the check of ``pipeline_kwargs``.

    The factory must be defined in the module's source, read without importing it (the
    flow is built in every task process; importing the module would import TensorFlow in
    each); a module whose names cannot be read from its source is checked when the step runs.
    """
    if callable(value) and not isinstance(value, str):
        return value, None
    if _blank(value):
        raise IntuneAttributeError(
            '@intune needs pipeline="package.module:factory", the dataset factory to tune '
            '(e.g. pipeline="examples.criteo:criteo_pipeline")')
    if not isinstance(value, str) or not _REF.match(value.strip()):
        raise IntuneAttributeError(
            f"@intune pipeline={value!r} is malformed; write it as \"package.module:factory\" "
            "(e.g. \"examples.criteo:criteo_pipeline\")")
    ref = value.strip()
    try:
        return ref, check_reference(ref, what="@intune pipeline")
    except PipelineError as exc:
        raise IntuneAttributeError(str(exc)) from None


def _kwargs(value) -> dict:
    if _blank(value):
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise IntuneAttributeError(
                f"@intune pipeline_kwargs={value!r} is not JSON; give a JSON object such as "
                "'{\"batch_size\": 1024}'") from None
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise IntuneAttributeError(
            f"@intune pipeline_kwargs must be a dict of keyword arguments for the factory, "
            f"got {type(value).__name__}")
    return dict(value)


def _is_parameter(value) -> bool:
    try:
        from metaflow import Parameter
    except ImportError:  # pragma: no cover - metaflow is what calls us
        return False
    return isinstance(value, Parameter)


def deferred(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """The attributes whose value is known only on the task (Parameters, callable kwargs)."""
    out = {k: v for k, v in attributes.items() if _is_parameter(v)}
    if callable(attributes.get("pipeline_kwargs")):
        out["pipeline_kwargs"] = attributes["pipeline_kwargs"]
    return out


def build_time_values(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """``attributes`` with deferred values replaced by what can be checked at flow build."""
    out = dict(attributes)
    for key, value in deferred(attributes).items():
        if key == "pipeline_kwargs" and not _is_parameter(value):
            out[key] = None
            continue
        default = value.kwargs.get("default", getattr(value, "_override_kwargs", {}).get("default"))
        out[key] = None if callable(default) else default
    return out


def resolve(attributes: Mapping[str, Any], flow) -> dict[str, Any]:
    """``attributes`` with deferred values replaced by this run's values."""
    out = dict(attributes)
    for key, value in deferred(attributes).items():
        if _is_parameter(value):
            out[key] = getattr(flow, value.name)
        else:
            try:
                out[key] = value(flow)
            except Exception as exc:
                raise IntuneAttributeError(
                    f"@intune pipeline_kwargs callable raised {type(exc).__name__}: {exc}; it "
                    "receives the flow and must return a dict of factory arguments") from exc
    return out


def coerce(attributes: Mapping[str, Any], *, known_methods: tuple[str, ...] | None = None) -> Settings:
    """Turn raw decorator attributes into :class:`Settings`, or raise IntuneAttributeError."""
    unknown = sorted(set(attributes) - set(DEFAULTS))
    if unknown:
        raise IntuneAttributeError(
            f"@intune does not know {', '.join(map(repr, unknown))}; its options are "
            f"{', '.join(DEFAULTS)}")
    attrs = {**DEFAULTS, **{k: v for k, v in attributes.items()}}
    budget = attrs["budget_s"]
    pipeline, source = check_pipeline(attrs["pipeline"])
    settings = Settings(
        pipeline=pipeline,
        budget_s=DEFAULTS["budget_s"] if _blank(budget) else _number("budget_s", budget, allow_zero=False),
        strict=_bool("strict", attrs["strict"]),
        pipeline_kwargs=_kwargs(attrs["pipeline_kwargs"]),
    )
    if source is not None:
        try:
            check_arguments(pipeline, source, settings.pipeline_kwargs)
        except PipelineError as exc:
            raise IntuneAttributeError(f"@intune pipeline_kwargs: {exc}") from None
    if not _blank(attrs["cache"]):
        if not isinstance(attrs["cache"], str):
            raise IntuneAttributeError(
                f"@intune cache={attrs['cache']!r} must be a URI or path string "
                "(s3://bucket/prefix, /path/to/dir, memory://name)")
        settings.cache = attrs["cache"].strip()
        from ..cache import get_cache

        try:
            get_cache(settings.cache)  # tune()'s parser; contacts nothing
        except CacheError as exc:
            raise IntuneAttributeError(f"@intune cache: {exc}") from None
    if not _blank(attrs["cpu_budget"]):
        settings.cpu_budget = _number("cpu_budget", attrs["cpu_budget"], allow_zero=False)
    if not _blank(attrs["ram_budget"]):
        try:
            settings.ram_budget = parse_bytes(attrs["ram_budget"])
        except ValueError as exc:
            raise IntuneAttributeError(f"@intune ram_budget: {exc}") from None
    if not _blank(attrs["window_s"]):
        settings.window_s = _number("window_s", attrs["window_s"], allow_zero=False)
    if not _blank(attrs["timeout_s"]):
        settings.timeout_s = _number("timeout_s", attrs["timeout_s"], allow_zero=False)
    method = attrs["method"]
    if _blank(method):
        method = DEFAULTS["method"]
    if not isinstance(method, str):
        raise IntuneAttributeError(f"@intune method={method!r} must be a string")
    method = method.strip()
    if known_methods and method not in known_methods:
        raise IntuneAttributeError(
            f"@intune method={method!r} is not one of {', '.join(known_methods)}")
    settings.method = method
    return settings
