"""``@intune_task``: tune, then train, in one TaskFlow task on one worker.

Stack it under (or over) ``@task``; the function receives ``intune``, an
:class:`IntuneContext` with the tuned config and the pipeline built from it::

    @task
    @intune_task(pipeline="intune_flow.examples.criteo:criteo_pipeline", budget_s=30,
                 pipeline_kwargs="data")
    def train(data, intune=None):
        for batch in intune.dataset(): ...

``@task.intune(pipeline=..., ...)`` (registered by the provider entry point) is the same
as ``@task`` over ``@intune_task``; task arguments (``retries=...``) go with the tuning ones.
"""

from __future__ import annotations

import functools
import inspect
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..errors import OptionsError
from . import arguments
from .runner import result_payload, run_tuning

log = logging.getLogger("intune_flow.airflow")
WHERE = "intune_task"
OURS = (*arguments.NAMES, "inject_as")
"""Every argument of ``intune_task`` (and the tuning ones of ``@task.intune``)."""


@dataclass
class IntuneContext:
    """What the decorated function receives: the tuning outcome and a way to build the pipeline."""

    result: Any                     # intune_flow.TuneResult
    pipeline_kwargs: dict = field(default_factory=dict)
    payload: dict = field(default_factory=dict)   # result.to_dict(), secrets redacted (= XCom "intune")

    @property
    def config(self) -> dict:
        """The tuned knob values, ``{"read": 8, "parse": 2, ...}``."""
        return self.result.config

    @property
    def source(self) -> str:
        return self.result.source

    def dataset(self, **factory_kwargs):
        """The pipeline built with the tuned config (``pipeline_kwargs`` plus these overrides).
        For a scale-out result (``workers=``) it starts the chosen workers and returns the
        dataset distributed to them; they stop when the task function returns."""
        from ..scaleout.serve import Served

        self._served = getattr(self, "_served", None) or Served()
        return self._served.open(self.result, **{**self.pipeline_kwargs, **factory_kwargs})

    def close(self) -> None:
        """Stop the workers :meth:`dataset` started (the decorator calls it after the task)."""
        if getattr(self, "_served", None) is not None:
            self._served.close()

    def to_dict(self) -> dict:
        return dict(self.payload)


def intune_task(python_callable: Callable | None = None, *, pipeline=None, budget_s=60.0,
                cache=None, aws_conn_id=None, cpu_budget=None, ram_budget=None, strict=False,
                method="intune", window_s=None, timeout_s=None, pipeline_kwargs=None,
                workers=None, demand=None, inject_as="intune", **unknown):
    """Decorate a TaskFlow function so it tunes first and receives ``intune=IntuneContext``.

    ``pipeline_kwargs`` is a dict for the factory, or the name of one of the function's
    arguments whose value (e.g. an upstream task's output) is that dict. Arguments are
    checked when the DAG file is parsed. The tuning summary is also pushed to XCom under
    the key ``"intune"``.
    """
    arguments.refuse_unknown(unknown, where=WHERE, ours=OURS)
    arguments.require_pipeline(pipeline, where=WHERE)
    options = dict(pipeline=pipeline, budget_s=budget_s, cache=cache, aws_conn_id=aws_conn_id,
                   cpu_budget=cpu_budget, ram_budget=ram_budget, strict=strict, method=method,
                   window_s=window_s, timeout_s=timeout_s, workers=workers, demand=demand)
    templated = [f"{k}={v!r}" for k, v in {**options, "pipeline_kwargs": pipeline_kwargs}.items()
                 if isinstance(v, str) and arguments.is_deferred(v)]
    if templated:
        raise OptionsError(
            f"{WHERE} does not render Jinja templates ({', '.join(templated)}): pass plain "
            "values, or use InTuneOperator, whose arguments are templated")
    if isinstance(pipeline_kwargs, str):   # names the function argument that carries them
        if not pipeline_kwargs.isidentifier():
            raise OptionsError(f"{WHERE}: pipeline_kwargs={pipeline_kwargs!r} must be a dict or "
                               "name an argument of the decorated function")
        arguments.check(options, where=WHERE)
    else:
        arguments.check({**options, "pipeline_kwargs": pipeline_kwargs}, where=WHERE)
    if not isinstance(inject_as, str) or not inject_as.isidentifier():
        raise OptionsError(f"{WHERE}: inject_as must be an argument name, got {inject_as!r}")

    def decorate(fn):
        from airflow.sdk.bases.decorator import is_decorated_task

        if is_decorated_task(fn):  # @intune_task above @task: wrap the task's function
            import attr

            return attr.evolve(fn, function=_wrap(fn.function, options, pipeline_kwargs,
                                                  inject_as), kwargs=dict(fn.kwargs))
        return _wrap(fn, options, pipeline_kwargs, inject_as)

    return decorate(python_callable) if python_callable is not None else decorate


def _wrap(fn: Callable, options: dict, pipeline_kwargs, inject_as: str) -> Callable:
    sig = inspect.signature(fn)
    params = sig.parameters
    if inject_as not in params and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        raise OptionsError(
            f"{fn.__name__}() must accept the tuning result: add a parameter "
            f"`{inject_as}=None` (or **kwargs)")
    if isinstance(pipeline_kwargs, str) and pipeline_kwargs not in params:
        raise OptionsError(
            f"pipeline_kwargs={pipeline_kwargs!r} names no argument of {fn.__name__}(); "
            f"its arguments are {list(params)}")
    # Airflow binds call arguments and context keys against this signature: hide the
    # injected parameter so nobody has to pass it.
    visible = sig.replace(parameters=[p for n, p in params.items() if n != inject_as])

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if isinstance(pipeline_kwargs, str):
            bound = visible.bind_partial(*args, **kwargs).arguments
            factory_kwargs = bound.get(pipeline_kwargs) or {}
            if not isinstance(factory_kwargs, Mapping):
                raise OptionsError(
                    f"argument {pipeline_kwargs!r} of {fn.__name__}() must be a dict of "
                    f"pipeline factory arguments, got {type(factory_kwargs).__name__}")
        else:
            factory_kwargs = pipeline_kwargs or {}
        result, secrets = run_tuning({**options, "pipeline_kwargs": factory_kwargs},
                                     where=WHERE, logger=log)
        payload = result_payload(result, secrets)
        _push_xcom(payload)
        context = IntuneContext(result=result, pipeline_kwargs=dict(factory_kwargs),
                                payload=payload)
        kwargs[inject_as] = context
        try:
            return fn(*args, **kwargs)
        finally:
            context.close()

    wrapper.__signature__ = visible
    return wrapper


def _push_xcom(payload: dict) -> None:
    """Best effort: the tuning summary as XCom key "intune" of the running task."""
    try:
        from airflow.sdk import get_current_context

        get_current_context()["ti"].xcom_push(key="intune", value=payload)
    except Exception as exc:  # noqa: BLE001 - outside a task run there is nothing to push to
        log.debug("intune: tuning summary not pushed to XCom: %s", exc)


def task_intune(python_callable: Callable | None = None, **kwargs):
    """``@task.intune(pipeline=..., budget_s=..., <any @task argument>)``: tune, then run the function."""
    from airflow.sdk import task

    tune_kwargs = {k: kwargs.pop(k) for k in list(kwargs) if k in OURS}
    # What is left goes to @task; a near miss of one of ours is a typo, not a @task argument.
    typos = {k: m for k, m in arguments.misspelled(kwargs, OURS).items()
             if m not in tune_kwargs}
    arguments.refuse_unknown(typos, where="@task.intune", ours=OURS)
    arguments.require_pipeline(tune_kwargs.get("pipeline"), where="@task.intune")
    wrap = intune_task(**tune_kwargs)

    def decorate(fn):
        return task(**kwargs)(wrap(fn))

    return decorate(python_callable) if python_callable is not None else decorate
