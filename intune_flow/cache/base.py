"""The cache interface: a small key -> bytes store with conditional writes.

Every backend (local directory, S3, memory) implements :class:`Cache` and is tested
by one shared suite (tests/test_cache_contract.py).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod

from ..errors import CacheError

CREATE_ONLY = "*"
"""``put(..., if_version=CREATE_ONLY)``: write only if the key does not exist (S3 ``If-None-Match: *``)."""

QUARANTINE = ".quarantine/"
"""Quarantined copies of ``key`` live under ``key + QUARANTINE + <timestamp>``."""

_SEGMENT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._=+-]*$")


class CacheUnavailable(CacheError):
    """The backend cannot be reached or refuses us (outage, timeout, denied, no bucket).

    The caller (``tune()``) catches it and goes on with a local fallback cache.
    """


class CacheConflict(CacheError):
    """A conditional ``put`` lost: the key exists (create-only) or its version changed."""


def check_key(key: str) -> str:
    """Validate a key: ``/``-separated segments of letters, digits and ``._=+-``, no ``..``."""
    if not isinstance(key, str) or not key or len(key) > 900:
        raise CacheError(f"cache key must be a non-empty string under 900 characters, got {key!r}")
    for seg in key.split("/"):
        if not _SEGMENT.match(seg) or seg in (".", ".."):
            raise CacheError(
                f"invalid cache key {key!r}: each '/'-separated part must start with a letter, "
                "digit or '_' and use only letters, digits and '._=+-'")
    return key


class Cache(ABC):
    """A store of records by key. The contract every backend keeps:

    - ``get(key)`` returns ``(data, version)`` or ``None`` on a miss. ``version`` is an
      opaque token that changes whenever the stored bytes change.
    - ``put`` is atomic: a reader sees either the previous bytes or the new ones,
      never a partial write, even if the writer dies mid-put (SIGKILL, outage).
    - ``put(key, data, if_version=CREATE_ONLY)`` writes only if the key is absent;
      ``if_version=<token>`` only if the stored version is still ``token``; otherwise
      it raises :class:`CacheConflict` and stores nothing. ``if_version=None`` writes
      unconditionally. ``put`` returns the new version token.
    - ``list(prefix)`` returns the keys starting with ``prefix``, sorted, quarantined
      copies included (they contain ``QUARANTINE``).
    - ``delete(key)`` removes a key; returns whether it existed.
    - ``quarantine(key, reason, if_version=None)`` moves a record aside to
      ``key + QUARANTINE + <timestamp>`` (with the reason) so it is a miss from then
      on; with ``if_version`` it moves it only if it is still that version. Returns the
      quarantine key, or ``None`` if there was nothing (matching) to move.
    - Safe to share between threads; the local and S3 backends are also safe
      between processes and machines (conditional writes are the only coordination).
    - Backend failures (unreachable, slow past the retry budget, access denied, no
      bucket) raise :class:`CacheUnavailable`; bad arguments raise :class:`CacheError`.
    """

    uri: str

    @abstractmethod
    def get(self, key: str) -> tuple[bytes, str] | None: ...

    @abstractmethod
    def put(self, key: str, data: bytes, *, if_version: str | None = None) -> str: ...

    @abstractmethod
    def list(self, prefix: str = "") -> list[str]: ...

    @abstractmethod
    def delete(self, key: str) -> bool: ...

    @abstractmethod
    def quarantine(self, key: str, reason: str, *, if_version: str | None = None) -> str | None: ...

    def records(self, prefix: str = "") -> list[str]:
        """Keys under ``prefix`` that are live records (quarantined copies left out)."""
        return [k for k in self.list(prefix) if QUARANTINE not in k]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.uri!r})"
