"""Small helpers shared by the cache backends."""

from __future__ import annotations

import calendar
import os
import time


def quarantine_stamp() -> str:
    """A sortable, unique, key-safe timestamp: ``20261129T172233123456Z-1a2b``."""
    now = time.time()
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f"{int(now % 1 * 1e6):06d}Z"
    return f"{stamp}-{os.urandom(2).hex()}"


def stamp_time(stamp: str) -> float | None:
    """Unix time of a :func:`quarantine_stamp` (None if it is not one)."""
    try:
        base = time.strptime(stamp[:15], "%Y%m%dT%H%M%S")
        return calendar.timegm(base) + int(stamp[15:21]) / 1e6
    except (ValueError, IndexError):
        return None
