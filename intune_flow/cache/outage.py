"""The local fallback cache of an outage, and how its records reach the primary cache later.

While the primary cache (S3, say) is unavailable, ``tune()`` reads and writes a local
fallback, :func:`fallback_cache`: the local default cache directory, as an
:class:`OutageCache` that notes, per primary, every record it stores ("pending"). The next
run that reaches the primary calls :func:`publish_fallback` for its key before reading
it: a pending record is written to the primary with :func:`~.records.write_best`'s
compare-and-swap (the better record wins, a worse one never replaces a better one), and
its note becomes "published", so it is offered once, not every night. A newer record
stored in the fallback later is pending again.

The notes live in ``<fallback dir>/.outage/<hash of the primary's URI>/``, outside the
cache's keys, so ``intune-flow cache ls`` on that directory shows only records.
"""

from __future__ import annotations

import hashlib
import logging
import os

from .base import QUARANTINE, Cache, CacheUnavailable
from .local import LocalCache
from .memory import MemoryCache
from .records import WriteOutcome, read, write_best

log = logging.getLogger(__name__)

_NOTES = ".outage"
_PENDING, _PUBLISHED = b"pending", b"published"


class OutageCache(LocalCache):
    """A :class:`LocalCache` standing in for ``primary_uri``: each record it stores is noted
    as pending publication to that primary (a note per key, holding the record's version)."""

    def __init__(self, root: str | os.PathLike, primary_uri: str):
        super().__init__(root)
        self.primary_uri = primary_uri
        self._notes = (self.root / _NOTES
                       / hashlib.sha256(primary_uri.encode()).hexdigest()[:16])

    def _note_path(self, key: str):
        return self._notes / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".note")

    def _note(self, key: str) -> tuple[bytes, str] | None:
        try:
            state, _, version = self._note_path(key).read_bytes().partition(b" ")
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise CacheUnavailable(f"cannot read the outage note of {key}: {exc}") from exc
        return state, version.decode("ascii", "replace")

    def put(self, key: str, data: bytes, *, if_version: str | None = None) -> str:
        version = super().put(key, data, if_version=if_version)
        if QUARANTINE not in key:
            try:
                with self._lock(_NOTES + key):
                    self._write_atomic(self._note_path(key), _PENDING + b" " + version.encode())
            except OSError as exc:   # the record is stored; only its later publication is lost
                log.warning("stored %s in %s but could not note it for %s (%s); it will not be "
                            "copied there", key, self.uri, self.primary_uri, exc)
        return version

    def pending(self, key: str) -> str | None:
        """The version of ``key`` stored here and not yet offered to the primary, or None."""
        note = self._note(key)
        return note[1] if note is not None and note[0] == _PENDING else None

    def mark_published(self, key: str, version: str | None) -> bool:
        """Note ``key`` as published, if its note still names ``version`` (None: whatever
        it names). False when a newer record was stored meanwhile: that one stays pending."""
        try:
            with self._lock(_NOTES + key):
                note = self._note(key)
                if note is None or (version is not None and note[1] != version):
                    return False
                self._write_atomic(self._note_path(key), _PUBLISHED + b" " + note[1].encode())
                return True
        except (OSError, CacheUnavailable) as exc:   # it is offered again next run: harmless
            log.warning("could not note %s in %s as published (%s)", key, self.uri, exc)
            return False


def fallback_cache(primary: Cache) -> Cache:
    """Where records go while ``primary`` is unavailable: the local default cache directory
    (an :class:`OutageCache` for ``primary``), else memory (when ``primary`` is that directory)."""
    from . import default_cache_dir, get_cache
    from ..errors import CacheError

    try:
        candidate = get_cache(None)
    except CacheError:
        candidate = None
    if not isinstance(candidate, LocalCache):
        candidate = LocalCache(default_cache_dir())
    if isinstance(primary, LocalCache) and primary.root == candidate.root:
        return MemoryCache()
    return OutageCache(candidate.root, primary.uri)


def publish_fallback(primary: Cache, key, *,
                     expected_shapes: dict[str, tuple] | None = None) -> WriteOutcome | None:
    """Offer ``primary`` the record its outage fallback stored for ``key``, once.

    Call it with the run's key before reading the primary. Without a pending record it
    touches only the local directory and returns None. Otherwise it writes the record
    with :func:`~.records.write_best` (``"created"``, ``"replaced"``, or ``"kept"`` when the
    primary's is at least as good), marks it published and returns the outcome. Raises
    :class:`CacheUnavailable` when the primary cannot be reached (the note stays pending
    for the next run); a fallback directory that cannot be read counts as nothing pending.
    """
    fallback = fallback_cache(primary)
    if not isinstance(fallback, OutageCache):
        return None
    key = str(key)
    try:
        if fallback.pending(key) is None:
            return None
        found = read(fallback, key, expected_shapes=expected_shapes)
    except CacheUnavailable as exc:
        log.warning("could not read the outage fallback cache %s (%s); nothing copied to %s",
                    fallback.uri, exc, primary.uri)
        return None
    if found.record is None:   # gone or damaged (then quarantined): nothing to offer
        fallback.mark_published(key, None)
        return None
    outcome = write_best(primary, found.record, expected_shapes=expected_shapes)
    fallback.mark_published(key, found.version)
    log.info("cache %s: %s %s from the record the outage fallback %s stored (%.0f/s there, "
             "%.0f/s kept)", primary.uri, outcome.action, key, fallback.uri,
             found.record.throughput, outcome.stored_throughput)
    return outcome
