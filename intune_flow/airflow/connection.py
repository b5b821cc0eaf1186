"""An S3 client built from an Airflow connection, for the tuning cache.

With the Amazon provider installed, its ``S3Hook`` builds the client (every auth method it
supports works), with the config the cache's own client has: short timeouts, one try per
call (:func:`~intune_flow.cache.s3.client_config`; the connection's ``config_kwargs``
override it). Without it, the connection is read directly: ``login``/``password`` are the
access key and secret (or ``aws_access_key_id``/``aws_secret_access_key`` in extra), and
extra may hold ``endpoint_url`` (or ``service_config.s3.endpoint_url``), ``region_name``,
``aws_session_token``, ``addressing_style`` and ``config_kwargs`` (botocore ``Config``).
An endpoint missing from the connection comes from ``INTUNE_FLOW_S3_ENDPOINT_URL``, then
boto3's own ``AWS_ENDPOINT_URL(_S3)``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from ..cache.s3 import client_config
from ..cache.base import CacheUnavailable

log = logging.getLogger(__name__)


@dataclass
class S3Access:
    """A boto3 S3 client plus the secret strings it carries (to keep out of logs and results).

    ``built_by``: ``"S3Hook"`` (the Amazon provider) or ``"connection"`` (read directly).
    """

    client: object
    secrets: list[str] = field(default_factory=list)
    built_by: str = "connection"


def _mask(secrets: list[str]) -> None:
    try:
        from airflow.sdk.log import mask_secret
    except ImportError:  # pragma: no cover
        return
    for secret in secrets:
        mask_secret(secret)


def s3_access(conn_id: str) -> S3Access:
    """The S3 client for Airflow connection ``conn_id``; raises CacheUnavailable naming the
    fix when the connection cannot be read."""
    try:
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook
    except ImportError:
        S3Hook = None
    access = _from_hook(S3Hook, conn_id) if S3Hook is not None else _from_connection(conn_id)
    log.info("intune: S3 client for connection %r built by %s", conn_id,
             "the Amazon provider's S3Hook" if access.built_by == "S3Hook"
             else "intune_flow from the connection's fields")
    return access


def _unreadable(conn_id: str, exc: Exception) -> CacheUnavailable:
    env = f"AIRFLOW_CONN_{conn_id.upper()}"
    how = (f" or {env}" if env.replace("_", "").isalnum()
           else "; an id with characters other than letters, digits and '_' cannot be an "
                "environment variable in a shell")
    return CacheUnavailable(
        f"Airflow connection {conn_id!r} could not be read ({type(exc).__name__}: {exc}); "
        f"define it (UI, `airflow connections add {conn_id} ...`{how}) or leave aws_conn_id "
        "out to use the standard boto3 credential chain")


class UnreadableConnection:
    """The S3 client of a connection that could not be read: any use raises
    :class:`~intune_flow.cache.CacheUnavailable` saying why, so ``tune()`` goes on with its
    local fallback cache and warns, as for an unreachable store (a cache that is not S3
    never uses it); with ``strict=True`` that raises ``TuningError``."""

    def __init__(self, error: CacheUnavailable):
        self.error = error

    def __getattr__(self, name):
        if name.startswith("__"):    # copy, pickle and friends probing for hooks
            raise AttributeError(name)
        raise CacheUnavailable(str(self.error))


def _from_hook(S3Hook, conn_id: str) -> S3Access:
    """Through the provider's hook: its session (every auth method), our client config.

    The hook's own client (``get_conn()``) would use botocore's defaults: 60 s read
    timeouts and up to 5 tries per call, so a dead endpoint could hold the task minutes.
    """
    hook = S3Hook(aws_conn_id=conn_id)
    try:
        wrapper = hook.conn_config
    except Exception as exc:  # noqa: BLE001 - a connection that does not parse
        raise _unreadable(conn_id, exc) from None
    if not wrapper:   # the hook found no such connection and went on without one
        _from_connection(conn_id)   # raises the same CacheUnavailable as the direct path
    extra = wrapper.extra_config or {}
    endpoint = (wrapper.get_service_endpoint_url("s3")
                or os.environ.get("INTUNE_FLOW_S3_ENDPOINT_URL") or None)
    config = client_config(endpoint, overrides=extra.get("config_kwargs"),
                           addressing_style=extra.get("addressing_style"))
    creds = hook.get_credentials()
    secrets = [s for s in (creds.secret_key, creds.token) if s]
    _mask(secrets)
    client = hook.get_session(region_name=hook.region_name).client(
        "s3", endpoint_url=endpoint, config=config, verify=hook.verify)
    return S3Access(client, secrets, built_by="S3Hook")


def _from_connection(conn_id: str) -> S3Access:
    import boto3

    from airflow.sdk import BaseHook

    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception as exc:  # AirflowNotFoundException, or no task context to ask from
        raise _unreadable(conn_id, exc) from None
    extra = conn.extra_dejson or {}
    key = conn.login or extra.get("aws_access_key_id")
    secret = conn.password or extra.get("aws_secret_access_key")
    token = extra.get("aws_session_token")
    secrets = [s for s in (secret, token) if s]
    _mask(secrets)
    endpoint = (extra.get("endpoint_url")
                or (extra.get("service_config") or {}).get("s3", {}).get("endpoint_url")
                or os.environ.get("INTUNE_FLOW_S3_ENDPOINT_URL") or None)
    client = boto3.session.Session().client(
        "s3", endpoint_url=endpoint, region_name=extra.get("region_name") or None,
        aws_access_key_id=key or None, aws_secret_access_key=secret or None,
        aws_session_token=token or None,
        config=client_config(endpoint, overrides=extra.get("config_kwargs"),
                             addressing_style=extra.get("addressing_style")))
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
