"""``@intune`` attributes: the values known only on the task, then :class:`TuneOptions`.

Attributes arrive as Python values from the decorator, as strings or JSON from
``--with intune:budget_s=30`` and on remote runs: :meth:`TuneOptions.parse` coerces and
checks them like every other surface's arguments, and raises a
:class:`~intune_flow.errors.ConfigurationError` naming the attribute and the fix.

Two kinds of value are known only when the task runs: a flow ``Parameter`` (e.g.
``@intune(budget_s=budget)`` with ``budget = Parameter(...)`` in the class body) and a
callable ``pipeline_kwargs=lambda flow: {"files": flow.files}``. At flow build they are
checked with the Parameter's default (and ``{}``); :func:`resolve` substitutes the
run's values on the task.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..errors import ConfigurationError, OptionsError
from ..options import TuneOptions, coerce

WHERE = "@intune"
DEFAULTS: dict[str, Any] = TuneOptions.defaults("metaflow")


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
                raise OptionsError(
                    f"{WHERE}: the pipeline_kwargs callable raised {type(exc).__name__}: {exc}; "
                    "it receives the flow and must return a dict of factory arguments") from exc
    return out


def parameter_note(attributes: Mapping[str, Any], values: Mapping[str, Any]) -> str:
    """For an error in ``values`` (``attributes`` with their Parameters replaced by a value):
    " (...)" naming each attribute whose value came from a flow Parameter and is wrong on its
    own, with that Parameter, so the fix goes where the value came from (the run's command
    line or the Parameter's default), not to the decorator; "" when none is."""
    named = []
    for key, value in attributes.items():
        if _is_parameter(value) and key in values:
            try:
                coerce(key, values[key], where=WHERE)
            except ConfigurationError:
                named.append(f"{key} is the flow's Parameter {value.name!r}: this run's "
                              f"--{value.name} or the Parameter's default")
    return f" ({'; '.join(named)})" if named else ""


def parse(attributes: Mapping[str, Any]) -> TuneOptions:
    """The decorator's attributes (deferred ones resolved) as :class:`TuneOptions`.

    The pipeline's module must be findable and its source must define the factory and
    take the ``pipeline_kwargs`` (read without importing it: the flow is built in every
    task process, and importing the module would import TensorFlow in each)."""
    return TuneOptions.parse(attributes, where=WHERE, surface="metaflow", source="required")
