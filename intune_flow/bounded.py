"""Run a call that may hang (a user's factory, a dry build) in a daemon thread, with a deadline;
stop what a thread given up on left running."""

from __future__ import annotations

import ctypes
import threading
import weakref
from typing import Any, Callable

GRACE_S = 0.25  # how long a cancelled thread gets to return before it is interrupted

# thread id -> what it opened that can be cancelled from another thread (tf.data iterators)
_CANCELLABLE: dict[int, weakref.WeakSet] = {}
_ABANDONED: weakref.WeakSet = weakref.WeakSet()     # threads given up on
_LOCK = threading.Lock()


class Abandoned(BaseException):
    """Raised inside a thread whose caller gave up waiting for it (a BaseException, so that a
    pipeline's own ``except Exception`` does not swallow it)."""


def cancellable(obj) -> None:
    """Register ``obj`` (it has ``cancel()``) as the current thread's: :func:`abandon` of
    this thread cancels it."""
    with _LOCK:
        _CANCELLABLE.setdefault(threading.get_ident(), weakref.WeakSet()).add(obj)
        given_up = threading.current_thread() in _ABANDONED
    if given_up:    # opened by a thread already given up on (it runs on until it looks)
        obj.cancel()    # nothing runs in it yet: returns at once


def abandon(thread: threading.Thread, *also, interrupt: bool = False) -> None:
    """Stop ``thread``, which its caller no longer waits for, so it does not keep the CPUs
    busy (a probe's pipeline that never yields would otherwise run on beside training):
    cancel what it opened and ``also`` (now, and what it opens later); with ``interrupt``,
    give it ``GRACE_S`` to return, then raise :class:`Abandoned` in it (delivered when it
    next runs Python code). Interrupt only threads running plain Python loops (torch's
    loaders): an exception landing inside TensorFlow's tracing leaves its locks held."""
    if not thread.is_alive():
        return
    with _LOCK:
        _ABANDONED.add(thread)
        opened = list(_CANCELLABLE.pop(thread.ident, ()))
    def cancel_all():
        for obj in (*opened, *also):
            try:
                obj.cancel()
            except Exception:  # noqa: BLE001 - best effort: the interrupt below still comes
                pass

    # Cancelling can wait for calls in flight (a tf.data map blocked in a py_function): never
    # in the caller's thread.
    threading.Thread(target=cancel_all, name="intune-flow-cancel", daemon=True).start()
    if not interrupt:
        return
    thread.join(GRACE_S)
    if thread.is_alive():
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident),
                                                   ctypes.py_object(Abandoned))


def run_bounded(fn: Callable[[], Any], timeout_s: float) -> tuple[Any, BaseException | None, bool]:
    """Run ``fn`` in a daemon thread for at most ``timeout_s``: (result, exception, timed_out).

    A call still running at the deadline is abandoned (:func:`abandon`)."""
    box: dict = {}

    def target():
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller
            box["error"] = exc

    thread = threading.Thread(target=target, name="intune-flow-bounded", daemon=True)
    thread.start()
    thread.join(timeout_s)
    hung = thread.is_alive()
    if hung:
        abandon(thread)
    return box.get("result"), box.get("error"), hung


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
