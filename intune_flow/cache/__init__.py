"""The policy cache: per-schema tuning records in a local directory, S3 or memory.

``get_cache(None | uri | Cache)`` builds a backend:

- ``None``: ``$INTUNE_FLOW_CACHE`` if set, else a directory under the user cache dir
- ``"s3://bucket/prefix"``: S3 (endpoint from ``$INTUNE_FLOW_S3_ENDPOINT_URL`` or boto3's
  ``$AWS_ENDPOINT_URL``; credentials from the standard chain or ``s3_client=``)
- ``"file:///path"``, ``"/path"``, ``"~/path"``, ``"./path"``: a local directory
- ``"memory://name"``: an in-process store (the same one for the same name);
  ``"memory://"`` (no name): a new, empty store each call, so a ``tune()`` with it tunes
  afresh, whatever ran before it in the process
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import CacheError
from .base import CREATE_ONLY, QUARANTINE, Cache, CacheConflict, CacheUnavailable
from .local import LocalCache
from .memory import MemoryCache

CACHE_ENV = "INTUNE_FLOW_CACHE"

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def default_cache_dir() -> Path:
    """Where the local cache lives when nothing is configured."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("intune_flow")) / "cache"


def default_cache_uri() -> str:
    return os.environ.get(CACHE_ENV) or str(default_cache_dir())


def _s3(uri: str, s3_client) -> Cache:
    from .s3 import S3Cache

    rest = uri[len("s3://"):]
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise CacheError(f"cache URI {uri!r} names no bucket; use s3://BUCKET or s3://BUCKET/PREFIX")
    if not _BUCKET.match(bucket) or ".." in bucket:
        raise CacheError(
            f"cache URI {uri!r}: {bucket!r} is not a valid S3 bucket name (3-63 lowercase "
            "letters, digits, '.' or '-'); use s3://BUCKET/PREFIX")
    if any(c in prefix for c in "?#\\") or "//" in prefix.strip("/"):
        raise CacheError(f"cache URI {uri!r}: the prefix {prefix!r} has '?', '#', '\\' or an empty "
                         "path part; use s3://BUCKET/some/prefix")
    if prefix.strip("/"):
        from .base import check_key

        try:
            check_key(prefix.strip("/"))
        except CacheError:
            raise CacheError(f"cache URI {uri!r}: prefix parts may use only letters, digits and "
                             "'._=+-'; use s3://BUCKET/some/prefix") from None
    return S3Cache(bucket, prefix, client=s3_client)


def get_cache(cache: "None | str | os.PathLike | Cache" = None, *, s3_client=None) -> Cache:
    """Build a cache from ``None`` (the default), a URI or path, or return a :class:`Cache` as is.

    Raises :class:`CacheError` for a malformed URI, naming the problem and the fix.
    Nothing is contacted here: an unreachable store shows up on first use as
    :class:`CacheUnavailable`.
    """
    if isinstance(cache, Cache):
        return cache
    if cache is None:
        cache = default_cache_uri()
    if isinstance(cache, os.PathLike):
        return LocalCache(cache)
    if not isinstance(cache, str):
        raise CacheError(f"cache must be None, a URI string or a Cache, got {type(cache).__name__}; "
                         "use e.g. 's3://bucket/prefix' or a directory path")
    uri = cache.strip()
    if not uri:
        raise CacheError("empty cache URI; use s3://BUCKET/PREFIX, a directory path or memory://")
    scheme = _SCHEME.match(uri)
    if scheme is None:
        if ":" in uri.split("/", 1)[0] and not uri.startswith((".", "/", "~")):
            raise CacheError(f"cache URI {uri!r} is malformed; use s3://BUCKET/PREFIX, "
                             "file:///abs/dir, a directory path or memory://")
        return LocalCache(uri)
    name = scheme.group(1).lower()
    if name == "s3":
        return _s3(uri, s3_client)
    if name == "file":
        path = uri[len("file://"):]
        if not path.startswith("/"):
            raise CacheError(f"cache URI {uri!r}: file URIs need an absolute path; use "
                             "file:///abs/dir or just the directory path")
        return LocalCache(path)
    if name == "memory":
        label = uri[len("memory://"):]
        return MemoryCache.named(label) if label else MemoryCache()
    raise CacheError(f"cache URI scheme {name!r}:// is not supported; use s3://BUCKET/PREFIX "
                     "(S3 or S3-compatible), file:///dir, a directory path or memory://")


__all__ = ["CACHE_ENV", "CREATE_ONLY", "QUARANTINE", "Cache", "CacheConflict", "CacheError",
           "CacheUnavailable", "LocalCache", "MemoryCache", "default_cache_dir",
           "default_cache_uri", "get_cache"]
