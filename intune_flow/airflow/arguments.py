"""Checks of the tuning arguments, run when a DAG file is parsed (no I/O, no heavy imports).

A value that is still a Jinja template (``"{{ ... }}"``) or an Airflow ``XComArg`` is only
known when the task runs; it is checked then, by :func:`check_runtime`.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

from ..errors import IntuneError, PipelineError
from ..resources import parse_bytes

METHODS = ("intune", "ones", "autotune", "heuristic", "hillclimb", "random", "optuna")
"""Tuning methods ``tune()`` accepts (``intune`` is the RL policy; the rest are baselines).
A copy of ``intune_flow.tune.METHODS``, so parsing a DAG needs no numpy; a test keeps them equal."""

_PIPELINE_REF = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


class ArgumentError(IntuneError, ValueError):
    """An argument of ``InTuneOperator`` or ``intune_task`` is invalid (the message says how)."""


def is_deferred(value: Any) -> bool:
    """True for values only known at run time: Jinja templates and XComArgs."""
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    try:
        from airflow.sdk.definitions._internal.mixins import ResolveMixin
    except ImportError:  # pragma: no cover - Airflow is installed wherever this runs
        return False
    return isinstance(value, ResolveMixin)


_EXAMPLES = {"cpu_budget": 2, "timeout_s": 30}


def _positive(name: str, value: Any, *, optional: bool) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, str) and not is_deferred(value):
        try:
            value = float(value)
        except ValueError:
            raise ArgumentError(f"{name} must be a positive number of seconds/cores, "
                                f"got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ArgumentError(f"{name} must be a positive number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ArgumentError(f"{name} must be a positive number, got {value!r}; "
                            f"give e.g. {name}={_EXAMPLES.get(name, 60)}")
    return float(value)


def check_pipeline(pipeline: Any) -> None:
    """``"package.module:attribute"`` or a callable factory."""
    if callable(pipeline) and not isinstance(pipeline, str):
        return
    if not isinstance(pipeline, str):
        raise PipelineError(f"pipeline must be a 'module:attribute' string or a callable, "
                            f"got {type(pipeline).__name__}")
    if is_deferred(pipeline):
        return
    if not _PIPELINE_REF.match(pipeline.strip()):
        raise PipelineError(
            f"pipeline {pipeline!r} is not a 'module:attribute' reference; write it like "
            "'examples.criteo:criteo_pipeline' (the module must be importable on the worker)")


def check_source(pipeline: str, pipeline_kwargs: Any = None) -> None:
    """What the module's source proves wrong (read, not imported): a factory it does not
    define, a factory argument it does not take. A module this process cannot find is left
    to the worker, whose environment may have it when the DAG processor's does not."""
    from ..reference import check_reference

    kwargs = pipeline_kwargs if isinstance(pipeline_kwargs, Mapping) else None
    check_reference(pipeline, kwargs, missing_ok=True)


def check_cache(cache: Any) -> None:
    """``None`` (the default cache), a directory, ``file:///dir``, ``s3://bucket/prefix`` or ``memory://``.

    The same parser ``tune()`` uses; it contacts nothing.
    """
    if cache is None or is_deferred(cache):
        return
    from ..cache import get_cache

    get_cache(cache)


def check_method(method: Any, methods: tuple[str, ...] = METHODS) -> None:
    if is_deferred(method):
        return
    if method not in methods:
        raise ArgumentError(f"unknown method {method!r}; use one of {list(methods)}")


def check_ram(ram_budget: Any) -> None:
    if ram_budget is None or is_deferred(ram_budget):
        return
    try:
        parse_bytes(ram_budget)
    except ValueError as exc:
        raise ArgumentError(f"ram_budget: {exc}") from None


def check_pipeline_kwargs(pipeline_kwargs: Any, *, allow_name: bool = False) -> None:
    if pipeline_kwargs is None or is_deferred(pipeline_kwargs):
        return
    if allow_name and isinstance(pipeline_kwargs, str):
        if not pipeline_kwargs.isidentifier():
            raise ArgumentError(f"pipeline_kwargs={pipeline_kwargs!r} must name an argument of "
                                "the decorated function")
        return
    if not isinstance(pipeline_kwargs, Mapping):
        raise ArgumentError(f"pipeline_kwargs must be a dict of keyword arguments for the "
                            f"pipeline factory, got {type(pipeline_kwargs).__name__}")
    bad = [k for k in pipeline_kwargs if not isinstance(k, str) or not k.isidentifier()]
    if bad:
        raise ArgumentError(f"pipeline_kwargs keys must be argument names, got {bad}")


def check_all(*, pipeline, budget_s, cache, aws_conn_id, cpu_budget, ram_budget, strict, method,
              window_s, timeout_s, pipeline_kwargs, allow_kwargs_name: bool = False) -> None:
    """Every check above, in argument order: raise the first problem found."""
    check_pipeline(pipeline)
    if not is_deferred(budget_s):
        _positive("budget_s", budget_s, optional=False)
    check_cache(cache)
    if aws_conn_id is not None and not is_deferred(aws_conn_id):
        if not isinstance(aws_conn_id, str) or not aws_conn_id.strip():
            raise ArgumentError(f"aws_conn_id must be a connection id string, got {aws_conn_id!r}")
    if not is_deferred(cpu_budget):
        _positive("cpu_budget", cpu_budget, optional=True)
    check_ram(ram_budget)
    if not isinstance(strict, bool):
        raise ArgumentError(f"strict must be True or False, got {strict!r}")
    check_method(method)
    if not is_deferred(window_s):
        _positive("window_s", window_s, optional=True)
    if not is_deferred(timeout_s):
        _positive("timeout_s", timeout_s, optional=True)
    check_pipeline_kwargs(pipeline_kwargs, allow_name=allow_kwargs_name)
    if isinstance(pipeline, str) and not is_deferred(pipeline):
        static = (isinstance(pipeline_kwargs, Mapping)
                  and not any(is_deferred(v) for v in pipeline_kwargs.values()))
        check_source(pipeline, pipeline_kwargs if static else None)


def number(name: str, value: Any, *, optional: bool = True) -> float | None:
    """A rendered (run-time) numeric argument as float; templates render to strings."""
    return _positive(name, value, optional=optional)


def ram(value: Any) -> int | str | None:
    """A rendered RAM budget: bytes as int, or a size string tune() parses (``"4GiB"``)."""
    if value is None or value == "" or value == "None":
        return None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    check_ram(value)
    return value

