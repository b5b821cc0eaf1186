"""Defaults the step's own context supplies: budgets from ``@resources``, the cache location."""

from __future__ import annotations

import os
from typing import Iterable

CACHE_ENV = "INTUNE_FLOW_CACHE"
CACHE_SUBDIR = "intune_flow"
"""Under an S3 datastore root, the cache lives at ``<DATASTORE_SYSROOT_S3>/intune_flow``."""

_RESOURCE_DECOS = ("resources", "kubernetes", "batch")


def resource_budgets(decorators: Iterable) -> tuple[float | None, int | None]:
    """``(cpu, ram bytes)`` the user asked for on this step with ``@resources`` (or
    ``@kubernetes``/``@batch``); None where nothing was set explicitly. The largest wins,
    as Metaflow does when several of them are present."""
    cpu: float | None = None
    ram: int | None = None
    for deco in decorators:
        if getattr(deco, "name", None) not in _RESOURCE_DECOS:
            continue
        user_set = getattr(deco, "_user_defined_attributes", None)
        attrs = getattr(deco, "attributes", {}) or {}
        for key in ("cpu", "memory"):
            if user_set is not None and key not in user_set:
                continue
            try:
                value = float(attrs.get(key))
            except (TypeError, ValueError):
                continue
            if value <= 0:
                continue
            if key == "cpu":
                cpu = value if cpu is None else max(cpu, value)
            else:
                mem = int(value * 2**20)  # Metaflow memory is in MB
                ram = mem if ram is None else max(ram, mem)
    return cpu, ram


def default_cache(datastore_type: str | None) -> tuple[str | None, str]:
    """Where the cache lives when the decorator names none, and why.

    ``$INTUNE_FLOW_CACHE`` first; then, when Metaflow's datastore is S3, a prefix under its
    datastore root (so every machine of the flow shares it); else None, which tells
    ``tune`` to use its local default directory.
    """
    env = os.environ.get(CACHE_ENV)
    if env:
        return env, f"${CACHE_ENV}"
    if datastore_type == "s3":
        from metaflow.metaflow_config import DATASTORE_SYSROOT_S3

        if DATASTORE_SYSROOT_S3:
            return f"{DATASTORE_SYSROOT_S3.rstrip('/')}/{CACHE_SUBDIR}", "the Metaflow S3 datastore root"
    return None, "the local default"


def datastore_s3_client(cache: str | None):
    """A boto3 client for Metaflow's own S3 endpoint when the cache is on S3 and only
    Metaflow knows the endpoint (``METAFLOW_S3_ENDPOINT_URL``); else None (boto3's chain)."""
    if not cache or not cache.startswith("s3://"):
        return None
    if any(os.environ.get(v) for v in ("INTUNE_FLOW_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
                                       "AWS_ENDPOINT_URL")):
        return None
    from metaflow.metaflow_config import S3_ENDPOINT_URL

    if not S3_ENDPOINT_URL:
        return None
    import boto3

    return boto3.client("s3", endpoint_url=S3_ENDPOINT_URL)
