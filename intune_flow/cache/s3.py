"""A cache in an S3 bucket (or any S3-compatible store) through boto3.

Conditional writes do the coordination: ``If-None-Match: *`` creates, ``If-Match: <ETag>``
replaces. Transient failures are retried a bounded number of times with backoff and
short timeouts; then, like on access denied or a missing bucket, :class:`CacheUnavailable`
is raised so ``tune()`` falls back to a local cache.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time

from .base import CREATE_ONLY, QUARANTINE, Cache, CacheConflict, CacheUnavailable, check_key
from .util import quarantine_stamp

log = logging.getLogger(__name__)

ENDPOINT_ENV = "INTUNE_FLOW_S3_ENDPOINT_URL"

_DENIED = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
           "InvalidToken", "TokenRefreshRequired", "AllAccessDisabled", "InvalidClientTokenId",
           "AccountProblem", "InvalidSecurity"}
_CONFLICT = {"PreconditionFailed", "ConditionalRequestConflict"}
_MISSING = {"NoSuchKey", "404", "NotFound"}
_TRANSIENT = {"SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable",
              "RequestTimeTooSkewed", "Throttling", "ThrottlingException", "503", "500"}


def client_config(endpoint_url: str | None = None, *, connect_timeout: float = 2.0,
                  read_timeout: float = 5.0, overrides: dict | None = None,
                  addressing_style: str | None = None):
    """The botocore ``Config`` of every S3 client intune_flow builds (the cache's own, and
    one from an Airflow connection, with or without the Amazon provider's ``S3Hook``).

    Short timeouts and one try per call: :class:`S3Cache` retries within its own deadline,
    so an unreachable store costs seconds, not botocore's default 60 s read timeout times
    five tries. Path-style addressing for a custom endpoint. ``overrides`` (botocore
    ``Config`` arguments, e.g. a connection's ``config_kwargs``) win over all of it.
    """
    from botocore import UNSIGNED
    from botocore.config import Config

    config = {"connect_timeout": connect_timeout, "read_timeout": read_timeout,
              "retries": {"total_max_attempts": 1, "mode": "standard"}}
    config.update(overrides or {})
    if config.get("signature_version") == "unsigned":   # as the Amazon provider reads it
        config["signature_version"] = UNSIGNED
    style = addressing_style or (config.get("s3") or {}).get("addressing_style") or (
        "path" if endpoint_url else None)
    if style:
        config["s3"] = {**(config.get("s3") or {}), "addressing_style": style}
    return Config(**config)


class _Missing(Exception):
    """Internal: the object does not exist."""


class S3Cache(Cache):
    """Records as objects under ``s3://bucket/prefix/``.

    ``client`` is any boto3 S3 client (e.g. from an Airflow connection); without one a
    client is made from the standard credential chain, with the endpoint from
    ``INTUNE_FLOW_S3_ENDPOINT_URL`` (or boto3's own ``AWS_ENDPOINT_URL[_S3]``).
    Each operation makes at most ``attempts`` tries within ``deadline_s`` seconds.
    """

    def __init__(self, bucket: str, prefix: str = "", *, client=None,
                 endpoint_url: str | None = None, attempts: int = 3, backoff_s: float = 0.2,
                 connect_timeout: float = 2.0, read_timeout: float = 5.0,
                 deadline_s: float = 20.0):
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.uri = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self.attempts = max(1, int(attempts))
        self.backoff_s = backoff_s
        self.deadline_s = deadline_s
        self._timeouts = (connect_timeout, read_timeout)
        self._endpoint_url = endpoint_url or os.environ.get(ENDPOINT_ENV) or None
        self._client = client
        self._given_client = client is not None
        self._client_lock = threading.Lock()

    # -- plumbing ------------------------------------------------------------------------
    @property
    def client(self):
        with self._client_lock:
            if self._client is None:
                self._client = self._make_client()
            return self._client

    def _make_client(self):
        try:
            import boto3
        except ImportError as exc:  # pragma: no cover - boto3 is in the s3 extra
            raise CacheUnavailable("the S3 cache needs boto3: pip install 'intune-flow[s3]'") from exc
        connect, read = self._timeouts
        config = client_config(self._endpoint_url, connect_timeout=connect, read_timeout=read)
        return boto3.session.Session().client("s3", endpoint_url=self._endpoint_url,
                                              config=config)

    def _obj(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _call(self, what: str, fn):
        """Run ``fn()`` with bounded retries; map failures to the cache's exceptions."""
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        deadline = time.monotonic() + self.deadline_s
        last = "no attempt"
        for attempt in range(self.attempts):
            try:
                return fn()
            except ClientError as exc:
                err = exc.response.get("Error", {})
                code = str(err.get("Code", ""))
                status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
                if code in _MISSING or (status == 404 and code not in ("NoSuchBucket",)):
                    raise _Missing() from None
                if code in _CONFLICT or status == 412:
                    raise CacheConflict(f"{what}: precondition failed ({code})") from None
                if code == "NoSuchBucket":
                    raise CacheUnavailable(
                        f"{what}: bucket {self.bucket!r} does not exist; create it or fix the "
                        f"cache URI {self.uri!r}") from None
                if code in _DENIED or status == 403:
                    raise CacheUnavailable(
                        f"{what}: access denied by the S3 store ({code}); check the credentials "
                        f"and that they may read and write {self.uri}") from None
                if code in _TRANSIENT or (status is not None and status >= 500):
                    last = f"{code or status}"
                else:
                    raise CacheUnavailable(f"{what}: S3 error {code or status}") from None
            except NoCredentialsError:
                raise CacheUnavailable(
                    f"{what}: no AWS credentials found; configure the standard credential chain "
                    "(env vars, ~/.aws, instance role) or pass an s3_client") from None
            except (BotoCoreError, OSError) as exc:
                last = type(exc).__name__
            if attempt + 1 < self.attempts:
                pause = self.backoff_s * 2 ** attempt * random.uniform(0.5, 1.5)
                if time.monotonic() + pause >= deadline:
                    break
                log.debug("S3 %s failed (%s); retry %d in %.2fs", what, last, attempt + 1, pause)
                time.sleep(pause)
            if time.monotonic() >= deadline:
                break
        raise CacheUnavailable(f"{what}: S3 store at {self.uri} unavailable after "
                               f"{attempt + 1} attempt(s) ({last}); endpoint "
                               f"{self._endpoint_text()}: check that the store is up and "
                               f"reachable, and the endpoint ({self._endpoint_source()})")

    def _endpoint_source(self) -> str:
        """Where the endpoint was set: the client given (with InTuneOperator's aws_conn_id,
        its connection's) or the env."""
        if self._given_client:
            return ("the s3_client's endpoint_url; with aws_conn_id, an Airflow connection's "
                    "extra endpoint_url")
        return ENDPOINT_ENV

    def _endpoint_text(self) -> str:
        """The endpoint the client talks to, without any user:password part of the URL."""
        try:
            url = str(self.client.meta.endpoint_url)
        except Exception:  # noqa: BLE001 - only for a message
            url = self._endpoint_url or "AWS default"
        scheme, sep, rest = url.partition("://")
        return f"{scheme}{sep}{rest.rpartition('@')[2]}" if sep else url

    # -- interface -------------------------------------------------------------------------
    def get(self, key: str) -> tuple[bytes, str] | None:
        obj = self._obj(key)

        def fetch():
            resp = self.client.get_object(Bucket=self.bucket, Key=obj)
            body = resp["Body"].read()
            length = resp.get("ContentLength")
            if length is not None and len(body) != length:
                raise OSError("short read")
            return body, resp["ETag"]

        try:
            return self._call(f"get {key}", fetch)
        except _Missing:
            return None

    def put(self, key: str, data: bytes, *, if_version: str | None = None) -> str:
        kwargs = {"Bucket": self.bucket, "Key": self._obj(key), "Body": bytes(data)}
        if if_version == CREATE_ONLY:
            kwargs["IfNoneMatch"] = "*"
        elif if_version is not None:
            kwargs["IfMatch"] = if_version
        try:
            return self._call(f"put {key}", lambda: self.client.put_object(**kwargs)["ETag"])
        except _Missing:
            raise CacheConflict(f"{key!r} no longer exists") from None

    def list(self, prefix: str = "") -> list[str]:
        base = f"{self.prefix}/" if self.prefix else ""

        def fetch():
            keys = []
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=base + prefix)
            for page in pages:
                keys += [o["Key"][len(base):] for o in page.get("Contents", [])]
            return keys

        try:
            return sorted(self._call(f"list {prefix or '/'}", fetch))
        except _Missing:
            return []

    def delete(self, key: str) -> bool:
        obj = self._obj(key)
        try:
            self._call(f"head {key}", lambda: self.client.head_object(Bucket=self.bucket, Key=obj))
        except _Missing:
            return False
        try:
            self._call(f"delete {key}", lambda: self.client.delete_object(Bucket=self.bucket, Key=obj))
        except _Missing:
            return False
        return True

    def quarantine(self, key: str, reason: str, *, if_version: str | None = None) -> str | None:
        obj = self._obj(key)
        qkey = f"{key}{QUARANTINE}{quarantine_stamp()}"
        if if_version is None:
            try:
                if_version = self._call(f"head {key}", lambda: self.client.head_object(
                    Bucket=self.bucket, Key=obj))["ETag"]
            except _Missing:
                return None
        note = reason.encode("ascii", "replace").decode().replace("\n", " ")[:1000]
        try:
            self._call(f"quarantine {key}", lambda: self.client.copy_object(
                Bucket=self.bucket, Key=self._obj(qkey), CopySource={"Bucket": self.bucket, "Key": obj},
                CopySourceIfMatch=if_version, Metadata={"reason": note},
                MetadataDirective="REPLACE"))
            self._call(f"delete {key}", lambda: self.client.delete_object(
                Bucket=self.bucket, Key=obj, IfMatch=if_version))
        except (_Missing, CacheConflict):
            return None
        return qkey
