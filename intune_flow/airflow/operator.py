"""``InTuneOperator``: the tuning phase of a training DAG, as one Airflow task."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from airflow.sdk import BaseOperator

from . import arguments
from .runner import result_payload, run_tuning


class InTuneOperator(BaseOperator):
    """Tune an input pipeline on the worker and push the result to XCom.

    :param pipeline: the factory, ``"package.module:attribute"`` (importable on the worker)
        or a callable. Templated.
    :param budget_s: seconds of tuning at most (a cache hit takes far less). Templated.
    :param cache: where tuned configs are kept: a directory, ``s3://bucket/prefix`` or
        ``memory://``; ``None`` uses ``INTUNE_FLOW_CACHE`` or the default directory. Templated.
    :param aws_conn_id: Airflow connection with the S3 credentials and endpoint for an
        ``s3://`` cache; ``None`` uses the standard boto3 credential chain. Templated.
    :param cpu_budget: cores the pipeline may use (default: what the worker may use). Templated.
    :param ram_budget: bytes or a size like ``"4GiB"`` (default: this process's RSS plus half
        of the available memory). Templated.
    :param strict: raise when tuning fails instead of falling back to the cached or default config.
    :param method: ``"intune"`` (the RL policy) or a baseline name. Templated.
    :param window_s: seconds per measurement window (default: tune() chooses). Templated.
    :param timeout_s: seconds a probe may see no element, or the factory's first build may
        take, before it is abandoned (default: tune()'s, 30 s and 60 s). Templated.
    :param pipeline_kwargs: keyword arguments for the factory (e.g. ``{"files": [...]}``, or an
        upstream task's output). Templated.
    :param workers: scale out onto tf.data service workers, e.g. ``"local:4x1"`` or
        ``"ray:32x4"`` (at most N workers of C cores; tuning picks how many run); the training
        task starts them from the XCom result with :func:`intune_flow.scaleout.serve`.
        Templated.
    :param demand: records/s the accelerator consumes (with ``workers``): no more workers
        once the delivered rate meets it. Templated.

    Returns ``TuneResult.to_dict()``: ``config``, ``throughput``, ``start_throughput``,
    ``source``, ``tuning_seconds``, ``seconds_saved``, ``reason``, ``fingerprint``, ...
    """

    template_fields: Sequence[str] = arguments.TEMPLATED
    ui_color = "#e8f4e8"

    def __init__(self, *, task_id: str, pipeline: str | Callable | None = None,
                 budget_s: float | str = 60.0,
                 cache: str | None = None, aws_conn_id: str | None = None,
                 cpu_budget: float | None = None, ram_budget: int | str | None = None,
                 strict: bool = False, method: str = "intune", window_s: float | None = None,
                 timeout_s: float | None = None,
                 pipeline_kwargs: Mapping[str, Any] | None = None, workers: str | None = None,
                 demand: float | None = None, **kwargs) -> None:
        where = f"InTuneOperator (task_id {task_id!r})"
        # Airflow's own messages would only call them invalid, or the pipeline missing
        arguments.refuse_unknown(arguments.misspelled(kwargs), where=where)
        arguments.require_pipeline(pipeline, where=where)
        super().__init__(task_id=task_id, **kwargs)
        given = dict(pipeline=pipeline, budget_s=budget_s, cache=cache, aws_conn_id=aws_conn_id,
                     cpu_budget=cpu_budget, ram_budget=ram_budget, strict=strict,
                     method=method, window_s=window_s, timeout_s=timeout_s,
                     pipeline_kwargs=pipeline_kwargs, workers=workers, demand=demand)
        arguments.check(given, where=where)   # a mistake is a DAG import error
        # Airflow 3 calls a callable found in a template field as a template: keep a factory
        # aside and show its name in the field.
        self._factory = pipeline if callable(pipeline) else None
        if self._factory is not None:
            given["pipeline"] = f"{pipeline.__module__}:{pipeline.__qualname__}"
        for name, value in given.items():
            setattr(self, name, value)

    def execute(self, context) -> dict:
        raw = {name: getattr(self, name) for name in arguments.NAMES}
        if self._factory is not None:
            raw["pipeline"] = self._factory
        result, secrets = run_tuning(raw, where="InTuneOperator", logger=self.log)
        return result_payload(result, secrets)
