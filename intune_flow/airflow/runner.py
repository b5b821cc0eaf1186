"""The tuning phase as a task runs it: S3 access from a connection, ``tune()``, logging.

Shared by :class:`~intune_flow.airflow.InTuneOperator` and :func:`~intune_flow.airflow.intune_task`.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Mapping

from ..errors import IntuneError, KnobError, PipelineError
from . import arguments
from .connection import redact, s3_access

log = logging.getLogger(__name__)

CONFIG_ERRORS = (arguments.ArgumentError, PipelineError, KnobError)
"""What a retry cannot fix. A cache outage or a strict tuning failure may pass, so those
are left to the task's ``retries``."""


def _config_errors_not_retried(func):
    """Raise what ``func`` raises of :data:`CONFIG_ERRORS` through :func:`not_retried`."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except CONFIG_ERRORS as exc:
            raise not_retried(exc) from None
    return wrapper


@_config_errors_not_retried
def run_tuning(*, pipeline, budget_s, cache=None, aws_conn_id=None, cpu_budget=None,
               ram_budget=None, strict=False, method="intune", window_s=None, timeout_s=None,
               pipeline_kwargs: Mapping[str, Any] | None = None, logger=None):
    """Tune and return ``(TuneResult, secrets)``; ``secrets`` must be kept out of anything stored.

    Arguments arrive rendered (templates resolved), so they are checked again here.
    Never raises for a tuning failure unless ``strict``: ``tune()`` falls back and says why.
    """
    from .. import tune

    logger = logger or log
    # Templates rendered without render_template_as_native_obj turn None into "None".
    cache, aws_conn_id, cpu_budget, ram_budget, window_s, timeout_s = (
        None if isinstance(v, str) and v.strip() in ("", "None") else v
        for v in (cache, aws_conn_id, cpu_budget, ram_budget, window_s, timeout_s))
    arguments.check_all(pipeline=pipeline, budget_s=budget_s, cache=cache,
                        aws_conn_id=aws_conn_id, cpu_budget=cpu_budget, ram_budget=ram_budget,
                        strict=strict, method=method, window_s=window_s, timeout_s=timeout_s,
                        pipeline_kwargs=pipeline_kwargs)
    secrets: list[str] = []
    s3_client = None
    if aws_conn_id:
        access = s3_access(aws_conn_id)
        s3_client, secrets = access.client, access.secrets
        logger.info("intune: S3 credentials and endpoint from Airflow connection %r", aws_conn_id)
    try:
        result = tune(pipeline, budget_s=arguments.number("budget_s", budget_s, optional=False),
                      cpu_budget=arguments.number("cpu_budget", cpu_budget),
                      ram_budget=arguments.ram(ram_budget), cache=cache, method=method,
                      strict=strict, pipeline_kwargs=dict(pipeline_kwargs or {}),
                      window_s=arguments.number("window_s", window_s),
                      timeout_s=arguments.number("timeout_s", timeout_s), s3_client=s3_client)
    except IntuneError:
        raise  # a user error (bad argument, unloadable pipeline) or strict mode: say so
    except Exception as exc:  # noqa: BLE001 - a crash inside tune() must not stop training
        if strict:
            raise
        result = _crash_result(pipeline, pipeline_kwargs, method, exc)
    report(result, logger, secrets)
    return result, secrets


def not_retried(exc: Exception) -> Exception:
    """``exc`` as an ``AirflowFailException`` too: a configuration error fails the task at
    once, since a retry would only repeat it. Still an instance of its own class."""
    from airflow.sdk.exceptions import AirflowFailException

    cls = type(type(exc).__name__, (type(exc), AirflowFailException),
               {"__module__": type(exc).__module__})
    new = cls(f"{exc} (a configuration error: not retried)")
    return new.with_traceback(exc.__traceback__)


def report(result, logger, secrets: list[str] = ()) -> None:
    """One log line for the outcome; a fallback is a warning carrying the reason."""
    line = redact(result.summary(), list(secrets))
    if result.source == "fallback":
        logger.warning("intune: tuning fell back: %s", line)
    else:
        logger.info("intune: %s", line)
    for warning in getattr(result, "warnings", None) or []:
        logger.warning("intune: %s", redact(str(warning), list(secrets)))


def _crash_result(pipeline, pipeline_kwargs, method, exc):
    """A fallback result with the factory's defaults when tune() itself crashed."""
    from ..pipeline import Pipeline
    from ..result import TuneResult

    reason = f"tuning crashed ({type(exc).__name__}: {exc}); running with the factory defaults"
    log.warning("intune: %s", reason, exc_info=True)
    try:
        config = Pipeline.load(pipeline, **dict(pipeline_kwargs or {})).space.defaults()
    except Exception:  # noqa: BLE001 - then the train step gets an empty config and defaults
        config = {}
    return TuneResult(config=config, source="fallback", reason=reason, method=method,
                      pipeline=pipeline if isinstance(pipeline, str) else None)


def result_payload(result, secrets: list[str]) -> dict:
    """The JSON-serializable dict pushed to XCom, secrets redacted."""
    return redact(result.to_dict(), list(secrets))


__all__ = ["report", "result_payload", "run_tuning"]
