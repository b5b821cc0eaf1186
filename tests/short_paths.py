"""A temp folder short enough for Unix sockets, whatever TMPDIR says.

A socket's path must fit in 108 bytes (``sun_path``). Under a long TMPDIR the session's
folders nest deep enough to pass that: seaweedfs then cannot bind its local sockets, and a
torch DataLoader's worker processes hang on theirs. Light on imports: ``conftest`` uses it
before any library is imported.
"""

from __future__ import annotations

import os
import tempfile

SHORT = 40
"""The longest temp base kept: deep enough for the test session's own nesting below it."""


def short_temp_base() -> str | None:
    """The temp dir if its path is short, else ``/tmp`` where writable (None: the default)."""
    base = tempfile.gettempdir()
    if len(base) <= SHORT or not os.access("/tmp", os.W_OK):
        return None
    return "/tmp"
