"""``CacheSession``: one run's cache, with the switch to a local cache on an outage."""

from __future__ import annotations

import logging
from typing import Callable, TypeVar

from ..errors import TuningError
from .base import Cache, CacheUnavailable
from .memory import MemoryCache
from .outage import fallback_cache

log = logging.getLogger("intune_flow.tune")
T = TypeVar("T")


class CacheSession:
    """Runs cache operations for one tuning run.

    When ``primary`` is unavailable (:class:`CacheUnavailable`), the session moves to the
    local fallback cache (:func:`~intune_flow.cache.outage.fallback_cache`: it notes what it
    stores, so the next run can publish it) with a warning (with ``strict``, it raises :class:`TuningError`
    instead); if that fails too, to memory. ``warnings`` collects what was said.
    """

    def __init__(self, primary: Cache, *, strict: bool = False):
        self.primary = self.cache = primary
        self.strict = strict
        self.warnings: list[str] = []

    @property
    def uri(self) -> str:
        """The cache in use now (the fallback after an outage)."""
        return self.cache.uri

    def call(self, fn: Callable[..., T], *args, **kwargs) -> T | None:
        """``fn(cache, *args, **kwargs)`` on the current cache, moving on once per outage;
        None when every cache failed."""
        for _ in range(3):
            try:
                return fn(self.cache, *args, **kwargs)
            except CacheUnavailable as exc:
                self._outage(exc)
        return None

    def _outage(self, exc: CacheUnavailable) -> None:
        if self.strict:
            raise TuningError(f"cache unavailable: {exc}") from exc
        if self.cache is not self.primary:  # the fallback failed too: keep going without one
            msg = f"fallback cache {self.cache.uri} unavailable too ({exc}); not caching this run"
            self.cache = MemoryCache()
        else:
            self.cache = fallback_cache(self.primary)
            msg = (f"cache {self.primary.uri} unavailable ({exc}); continuing with the local "
                   f"fallback cache {self.cache.uri}")
        log.warning(msg)
        self.warnings.append(msg)
