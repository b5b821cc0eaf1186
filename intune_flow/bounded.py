"""Run a call that may hang (a user's factory, a dry build) in a daemon thread, with a deadline."""

from __future__ import annotations

import threading
from typing import Any, Callable


def run_bounded(fn: Callable[[], Any], timeout_s: float) -> tuple[Any, BaseException | None, bool]:
    """Run ``fn`` in a daemon thread for at most ``timeout_s``: (result, exception, timed_out).

    A call still running at the deadline is abandoned (a thread cannot be interrupted)."""
    box: dict = {}

    def target():
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller
            box["error"] = exc

    thread = threading.Thread(target=target, name="intune-flow-bounded", daemon=True)
    thread.start()
    thread.join(timeout_s)
    return box.get("result"), box.get("error"), thread.is_alive()


class Hung(Exception):
    """A bounded call did not return within its deadline."""


def call_bounded(fn: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """``fn()`` within ``timeout_s``; its own exception re-raised, :class:`Hung` if it hangs."""
    value, error, hung = run_bounded(fn, timeout_s)
    if hung:
        raise Hung(f"{what} did not return within {timeout_s:g} s")
    if error is not None:
        raise error
    return value
