"""An S3 client built from an Airflow connection, for the tuning cache.

With the Amazon provider installed, its ``S3Hook`` builds the client (every auth method it
supports works). Without it, the connection is read directly: ``login``/``password`` are the
access key and secret (or ``aws_access_key_id``/``aws_secret_access_key`` in extra), and extra
may hold ``endpoint_url`` (or ``service_config.s3.endpoint_url``), ``region_name``,
``aws_session_token``, ``addressing_style`` and ``config_kwargs`` (botocore ``Config``).
An endpoint missing from the connection comes from ``INTUNE_FLOW_S3_ENDPOINT_URL``, then
boto3's own ``AWS_ENDPOINT_URL(_S3)``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..errors import CacheError

# Like the S3 cache's own client: short timeouts, one try per call (the cache retries
# within its own deadline), so an unreachable store costs seconds, not the task's timeout.
_DEFAULT_CONFIG = {"connect_timeout": 2, "read_timeout": 5,
                   "retries": {"max_attempts": 1, "mode": "standard"}}


@dataclass
class S3Access:
    """A boto3 S3 client plus the secret strings it carries (to keep out of logs and results)."""

    client: object
    secrets: list[str] = field(default_factory=list)


def _mask(secrets: list[str]) -> None:
    try:
        from airflow.sdk.log import mask_secret
    except ImportError:  # pragma: no cover
        return
    for secret in secrets:
        mask_secret(secret)


def s3_access(conn_id: str) -> S3Access:
    """The S3 client for Airflow connection ``conn_id``; raises CacheError naming the fix."""
    try:
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook
    except ImportError:
        S3Hook = None
    if S3Hook is not None:
        hook = S3Hook(aws_conn_id=conn_id)
        creds = hook.get_credentials()
        secrets = [s for s in (creds.secret_key, creds.token) if s]
        _mask(secrets)
        return S3Access(hook.get_conn(), secrets)
    return _from_connection(conn_id)


def _from_connection(conn_id: str) -> S3Access:
    import boto3
    from botocore.config import Config

    from airflow.sdk import BaseHook

    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception as exc:  # AirflowNotFoundException, or no task context to ask from
        raise CacheError(
            f"Airflow connection {conn_id!r} could not be read ({type(exc).__name__}: {exc}); "
            f"define it (UI, `airflow connections add {conn_id} ...` or AIRFLOW_CONN_"
            f"{conn_id.upper()}) or leave aws_conn_id out to use the standard boto3 "
            "credential chain") from None
    extra = conn.extra_dejson or {}
    key = conn.login or extra.get("aws_access_key_id")
    secret = conn.password or extra.get("aws_secret_access_key")
    token = extra.get("aws_session_token")
    secrets = [s for s in (secret, token) if s]
    _mask(secrets)
    endpoint = (extra.get("endpoint_url")
                or (extra.get("service_config") or {}).get("s3", {}).get("endpoint_url")
                or os.environ.get("INTUNE_FLOW_S3_ENDPOINT_URL") or None)
    config = dict(_DEFAULT_CONFIG)
    config.update(extra.get("config_kwargs") or {})
    style = extra.get("addressing_style") or ("path" if endpoint else None)
    if style:
        config["s3"] = {**config.get("s3", {}), "addressing_style": style}
    client = boto3.session.Session().client(
        "s3", endpoint_url=endpoint, region_name=extra.get("region_name") or None,
        aws_access_key_id=key or None, aws_secret_access_key=secret or None,
        aws_session_token=token or None, config=Config(**config))
    return S3Access(client, secrets)


def redact(value, secrets: list[str]):
    """``value`` (JSON-like) with every occurrence of each secret replaced by ``***``."""
    if not secrets:
        return value
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, "***")
        return value
    if isinstance(value, dict):
        return {redact(k, secrets): redact(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v, secrets) for v in value]
    return value
