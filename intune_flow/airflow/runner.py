"""The tuning phase as a task runs it: S3 access from a connection, ``tune()``, logging.

Shared by :class:`~intune_flow.airflow.InTuneOperator` and :func:`~intune_flow.airflow.intune_task`.
``tune()`` decides every fallback; a configuration error fails the task without its retries.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Mapping

from ..cache.base import CacheUnavailable
from ..errors import ConfigurationError
from . import arguments
from .connection import UnreadableConnection, redact, s3_access

log = logging.getLogger(__name__)


def _config_errors_not_retried(func):
    """Raise a :class:`ConfigurationError` from ``func`` through :func:`not_retried`: a
    retry cannot fix it. A cache outage or a strict tuning failure may pass, so those are
    left to the task's ``retries``."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except ConfigurationError as exc:
            raise not_retried(exc) from None
    return wrapper


@_config_errors_not_retried
def run_tuning(raw: Mapping[str, Any], *, where: str, logger=None):
    """Tune with the rendered arguments ``raw``; ``(TuneResult, secrets)``, where ``secrets``
    must be kept out of anything stored. Never raises for a tuning failure unless
    ``strict``: ``tune()`` falls back and says why."""
    from .. import tune

    logger = logger or log
    options, aws_conn_id = arguments.parse(raw, where=where)
    secrets: list[str] = []
    s3_client = None
    if aws_conn_id:
        try:
            access = s3_access(aws_conn_id)
        except CacheUnavailable as exc:    # tune() falls back to its local cache and says why
            s3_client = UnreadableConnection(exc)
        else:
            s3_client, secrets = access.client, access.secrets
            logger.info("intune: S3 credentials and endpoint from Airflow connection %r",
                        aws_conn_id)
    result = tune(options.pipeline, **{**options.tune_kwargs(), "s3_client": s3_client})
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
    if result.warnings:   # tune() logged each where it arose: point at them, not again
        logger.info("intune: %d warning(s) logged above; also in the XCom value's warnings",
                    len(result.warnings))


def result_payload(result, secrets: list[str]) -> dict:
    """The JSON-serializable dict pushed to XCom, secrets redacted."""
    return redact(result.to_dict(), list(secrets))


__all__ = ["report", "result_payload", "run_tuning"]
