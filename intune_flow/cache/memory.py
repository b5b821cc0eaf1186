"""An in-process cache: for tests and for runs that must not touch disk or network."""

from __future__ import annotations

import threading

from .base import CREATE_ONLY, QUARANTINE, Cache, CacheConflict, check_key
from .local import version_of
from .util import quarantine_stamp

_NAMED: dict[str, "MemoryCache"] = {}
_NAMED_LOCK = threading.Lock()


class MemoryCache(Cache):
    """A dict behind a lock. Thread-safe; not shared between processes.

    ``MemoryCache.named("x")`` (URI ``memory://x``) returns the same store each time
    within one process; the URI ``memory://`` (no name) a new one each time.
    """

    def __init__(self, name: str = ""):
        self.uri = f"memory://{name}"
        self._data: dict[str, bytes] = {}
        self.reasons: dict[str, str] = {}
        self._lock = threading.Lock()

    @classmethod
    def named(cls, name: str) -> "MemoryCache":
        with _NAMED_LOCK:
            if name not in _NAMED:
                _NAMED[name] = cls(name)
            return _NAMED[name]

    def get(self, key: str) -> tuple[bytes, str] | None:
        check_key(key)
        with self._lock:
            data = self._data.get(key)
        return None if data is None else (data, version_of(data))

    def put(self, key: str, data: bytes, *, if_version: str | None = None) -> str:
        check_key(key)
        data = bytes(data)
        with self._lock:
            current = self._data.get(key)
            if if_version == CREATE_ONLY and current is not None:
                raise CacheConflict(f"{key!r} already exists")
            if if_version not in (None, CREATE_ONLY) and (
                    current is None or version_of(current) != if_version):
                raise CacheConflict(f"{key!r} changed since version {if_version}")
            self._data[key] = data
        return version_of(data)

    def list(self, prefix: str = "") -> list[str]:
        with self._lock:
            return sorted(k for k in self._data if k.startswith(prefix))

    def delete(self, key: str) -> bool:
        check_key(key)
        with self._lock:
            return self._data.pop(key, None) is not None

    def quarantine(self, key: str, reason: str, *, if_version: str | None = None) -> str | None:
        check_key(key)
        with self._lock:
            current = self._data.get(key)
            if current is None or (if_version is not None and version_of(current) != if_version):
                return None
            qkey = f"{key}{QUARANTINE}{quarantine_stamp()}"
            self._data[qkey] = self._data.pop(key)
            self.reasons[qkey] = reason
            return qkey
