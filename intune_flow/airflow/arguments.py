"""The operator's and decorators' arguments: :class:`TuneOptions` plus ``aws_conn_id``.

When a DAG file is parsed, values that are still a Jinja template (``"{{ ... }}"``) or an
Airflow ``XComArg`` are only known when the task runs: :func:`check` leaves them to
:func:`parse`, which runs on the rendered values. Both raise a
:class:`~intune_flow.errors.ConfigurationError`, which the task does not retry.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..errors import OptionsError, did_you_mean, near_misses
from ..options import TuneOptions, missing_pipeline

NAMES = (*TuneOptions.names("airflow"), "aws_conn_id")
"""Every tuning argument of ``InTuneOperator``, ``intune_task`` and ``@task.intune``."""
TEMPLATED = tuple(n for n in NAMES if n != "strict")
"""The operator's template fields: every argument but the ``strict`` switch."""


def is_deferred(value: Any) -> bool:
    """True for values only known at run time: Jinja templates and XComArgs."""
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    try:
        from airflow.sdk.definitions._internal.mixins import ResolveMixin
    except ImportError:  # pragma: no cover - Airflow is installed wherever this runs
        return False
    return isinstance(value, ResolveMixin)


def misspelled(extra, ours=NAMES) -> dict[str, str]:
    """The keyword arguments left for Airflow (``retries=...``) that are near misses of
    ``ours``: typos of a tuning argument, not Airflow's (extra name -> the one of ours)."""
    return near_misses(extra, ours, cutoff=0.75)


def refuse_unknown(unknown, *, where: str, ours=NAMES) -> None:
    """Raise :class:`OptionsError` naming the arguments in ``unknown`` and the ones of
    ``ours`` they were meant to be; nothing when there are none."""
    if unknown:
        raise OptionsError(f"{where} got unknown argument(s) {sorted(unknown)}"
                           f"{did_you_mean(sorted(unknown), ours)}")


def require_pipeline(pipeline, *, where: str) -> None:
    """Raise :class:`OptionsError` when no ``pipeline`` was given (Airflow's own check would
    only say a keyword argument is missing)."""
    if pipeline is None:
        raise missing_pipeline(where)


def check(raw: Mapping[str, Any], *, where: str) -> None:
    """The parse-time check: everything but deferred values; the factory's module source
    is read where this process can find it (the worker may have modules this one lacks)."""
    _split(raw, where, deferred=is_deferred, source="optional")


def parse(raw: Mapping[str, Any], *, where: str) -> tuple[TuneOptions, str | None]:
    """The run-time parse of rendered arguments: (options, aws_conn_id)."""
    return _split(raw, where, deferred=None, source=None)


def _split(raw, where, deferred, source):
    raw = dict(raw)
    conn = raw.pop("aws_conn_id", None)
    if conn == "None":   # what Jinja renders for None
        conn = None
    if conn is not None and not (deferred and deferred(conn)):
        if not isinstance(conn, str) or not conn.strip():
            raise OptionsError(f"{where}: aws_conn_id must be a connection id string, got "
                               f"{conn!r}")
        conn = conn.strip()
    options = TuneOptions.parse(raw, where=where, surface="airflow", deferred=deferred,
                                source=source)
    return options, conn
