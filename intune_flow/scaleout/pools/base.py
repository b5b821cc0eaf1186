"""The worker pool contract, written once; :mod:`.local` and :mod:`.ray` implement it.

A :class:`WorkerPool` runs tf.data service workers (``WorkerServer``) for one training job.

* **A context manager.** ``with pool:`` starts the pool's ``DispatchServer`` in the calling
  (trainer) process; leaving the block stops every worker the pool started and the
  dispatcher, whether the block returned, raised, or the process got ``SIGTERM`` or
  ``KeyboardInterrupt``. ``start``/``stop`` work without ``with`` too (then call ``stop``
  in ``finally``; an ``atexit`` hook stops a pool left running at interpreter exit).
* **start(k) / resize(k)** start or stop workers until ``k`` run (``0 <= k <= max_workers``)
  and return once each new worker has registered with the dispatcher. The wait is bounded by
  ``registration_timeout_s``: it polls the workers and the dispatcher (no fixed sleeps);
  a worker that exits or never registers stops the workers started by that call and raises
  :class:`~intune_flow.errors.WorkerPoolError` naming the timeout and the fix.
* **stop()** stops every worker the pool started (a grace period, then by force) and the
  dispatcher; idempotent; never raises for a worker that is already gone.
* **target**: the dispatcher address for
  ``ds.apply(tf.data.experimental.service.distribute(..., service=pool.target))``;
  **workers**: how many of the pool's workers are alive now (fewer than asked after a loss);
  **worker_info**: one :class:`WorkerInfo` per running worker (address, pid, cores, node);
  **startup_guess_s**: the seconds a worker start is expected to take before one was timed
  (the kind's prior, or ``startup_guess_s=``; never above ``registration_timeout_s``, the
  longest a start may take), what tuning budgets the first worker start with;
  **ram_per_worker**: each worker's RAM budget in bytes (``ram_per_worker=``, or
  ``:SIZE`` in a spec), None if not stated; **worker_rss()**: the largest RSS of the running
  workers where the pool can read it (None elsewhere), what tuning's RAM guard holds
  against ``ram_per_worker``.
* **supervise()** replaces lost workers from then on: a thread of the pool checks every
  second and, for each worker that died (a local process exited, a Ray actor died), starts
  a replacement that registers with the same dispatcher (logged; kept in ``replacements``),
  until ``supervise(False)`` or ``stop()``. ``serve()`` turns it on while it serves.
* ``SIGTERM``: while a pool runs, a ``SIGTERM`` whose handler is still the default is turned
  into ``SystemExit(143)`` in the main thread, so ``with`` blocks and ``finally`` clauses
  stop the workers; when the main thread is stuck in native code (a read waiting for a
  worker that is gone) and has not exited ``SIGTERM_GRACE_S`` later, a watcher thread stops
  the pools and ends the process with 143. A handler installed by someone else (Airflow,
  Metaflow) is left alone.

What the service guarantees when a worker dies (``docs/scaleout.md``): ``parallel_epochs``
every surviving worker still produces its whole epoch (a replacement runs it again from the
start: more repeats); ``distributed_epoch`` each element at most once (the splits the lost
worker held are lost, nothing is repeated). In both, a finite epoch does not end after a
loss, replaced or not.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

from ...errors import OptionsError, WorkerPoolError

log = logging.getLogger("intune_flow.scaleout")

#: How often a worker tells the dispatcher it is alive (and learns of new tasks).
HEARTBEAT_MS = 1000
#: How long the dispatcher waits for a heartbeat before it considers a worker missing.
WORKER_TIMEOUT_MS = 10_000
#: A job no client reads any more is released this soon (TF's default is 5 minutes): every
#: tuning probe is a job, and a released one stops taking the workers' CPU and memory.
JOB_GC_MS = 2_000


MIN_WORKER_RAM = 512 * 2**20
"""The least RAM budget a worker may be given: a tf.data service worker's TensorFlow alone
holds about half a GiB (522 MiB in README-only trial 92, whose 'local:2x1:1MiB' was
accepted and fell back 18 s later on a RAM guard that every config failed)."""


def worker_ram(value) -> int:
    """``value`` (``'2GiB'``, ``'512MiB'``, bytes) as a worker's RAM budget in bytes; a
    ValueError saying why for what is no size or less than ``MIN_WORKER_RAM``."""
    from ...resources import format_bytes, parse_bytes

    ram = parse_bytes(value)
    if ram < MIN_WORKER_RAM:
        shown = format_bytes(ram) if ram >= 2**10 else f"{ram} bytes"
        raise ValueError(f"{shown} is less than a tf.data service worker needs: "
                         f"its TensorFlow alone holds about half a GiB; give at least "
                         f"{format_bytes(MIN_WORKER_RAM)}")
    return ram


@dataclass
class WorkerInfo:
    """One running worker of a pool."""

    index: int
    address: str = ""                 # host:port of its WorkerServer
    pid: int | None = None            # its process (a Ray actor's worker process for Ray)
    cores: tuple[int, ...] | int = 1  # pinned cores (local) or reserved CPUs (Ray)
    node: str = "127.0.0.1"           # the host it runs on
    started_s: float = 0.0            # seconds from launch to registration
    slot: int = 0                     # its share of the cores: the lowest one free at launch
    handle: Any = field(default=None, repr=False, compare=False)


class WorkerPool:
    """Base class of the worker pools; the module docstring is the contract."""

    kind = "base"
    STARTUP_GUESS_S = 10.0
    """The kind's prior for one worker start (launch to registration), in seconds."""

    def __init__(self, max_workers: int, *, cores_per_worker: int = 1,
                 registration_timeout_s: float = 120.0, stop_timeout_s: float = 10.0,
                 dispatcher_address: str | None = None, heartbeat_ms: int = HEARTBEAT_MS,
                 worker_timeout_ms: int = WORKER_TIMEOUT_MS,
                 startup_guess_s: float | None = None, ram_per_worker=None):
        if not isinstance(max_workers, int) or isinstance(max_workers, bool) or max_workers < 1:
            raise OptionsError(f"max_workers={max_workers!r}: give a whole number of workers >= 1")
        if not isinstance(cores_per_worker, int) or cores_per_worker < 1:
            raise OptionsError(f"cores_per_worker={cores_per_worker!r}: give a whole number >= 1")
        if registration_timeout_s <= 0:
            raise OptionsError(f"registration_timeout_s={registration_timeout_s!r}: give seconds > 0")
        if ram_per_worker is not None:
            try:
                ram_per_worker = worker_ram(ram_per_worker)
            except ValueError as exc:
                raise OptionsError(f"ram_per_worker={ram_per_worker!r}: {exc}; give a size "
                                   "such as '2GiB' or '512MiB', or a number of bytes") from None
        if startup_guess_s is not None and not startup_guess_s > 0:
            raise OptionsError(f"startup_guess_s={startup_guess_s!r}: give seconds > 0")
        self.max_workers = max_workers
        self.cores_per_worker = cores_per_worker
        self._startup_guess_s = startup_guess_s
        self.ram_per_worker: int | None = ram_per_worker
        self.registration_timeout_s = float(registration_timeout_s)
        self.stop_timeout_s = float(stop_timeout_s)
        self.heartbeat_ms = int(heartbeat_ms)
        self.worker_timeout_ms = int(worker_timeout_ms)
        self._dispatcher_address = dispatcher_address
        self._dispatcher = None
        self._running: list[WorkerInfo] = []
        self._next_index = 0
        self._target = 0                  # the count last asked for (what supervise keeps)
        self._lock = threading.RLock()
        self._stopped = False
        self._halt = threading.Event()    # set by stop(): a registration wait gives up
        self._supervised = False
        self._supervisor: threading.Thread | None = None
        self.replacements: list[dict] = []

    # -- the contract ---------------------------------------------------------------------
    def __enter__(self) -> "WorkerPool":
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def open(self) -> "WorkerPool":
        """Start the dispatcher in this process (and the pool's engine); idempotent."""
        with self._lock:
            if self._stopped:
                raise WorkerPoolError(f"this {self.kind} pool was stopped: make a new pool")
            if self._dispatcher is None:
                _ACTIVE.add(self)
                _install_sigterm()
                try:
                    self._open_engine()          # first: a missing engine fails fast
                    import tensorflow as tf

                    service = tf.data.experimental.service
                    self._dispatcher = service.DispatchServer(service.DispatcherConfig(
                        port=0, worker_timeout_ms=self.worker_timeout_ms,
                        job_gc_check_interval_ms=JOB_GC_MS // 2, job_gc_timeout_ms=JOB_GC_MS))
                except BaseException:
                    self.stop()
                    raise
        return self

    def start(self, k: int) -> "WorkerPool":
        """Open the pool and run ``k`` workers, each registered with the dispatcher."""
        self.open()
        self.resize(k)
        return self

    def resize(self, k: int) -> "WorkerPool":
        """Start or stop workers until ``k`` run; new ones are registered when this returns."""
        if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= self.max_workers:
            raise OptionsError(f"workers={k!r}: give a whole number from 0 to max_workers="
                               f"{self.max_workers}")
        self.open()
        with self._lock:
            self._target = k
            self._running = [w for w in self._running if self._alive(w)]
            if k < len(self._running):
                gone, self._running = self._running[k:], self._running[:k]
                self._terminate(gone)
            elif k > len(self._running):
                self._grow(k - len(self._running))
        return self

    def supervise(self, on: bool = True, interval_s: float = 1.0) -> "WorkerPool":
        """Replace lost workers while ``on`` (see the contract). The checking thread lives
        until :meth:`stop`: a local worker dies with the thread that started it."""
        with self._lock:
            self._supervised = bool(on)
            if on and self._supervisor is None and not self._stopped:
                self._supervisor = threading.Thread(target=self._supervise, args=(interval_s,),
                                                    name=f"intune-{self.kind}-pool", daemon=True)
                self._supervisor.start()
        return self

    @property
    def supervised(self) -> bool:
        """Whether lost workers are being replaced now."""
        return self._supervised

    def replace_lost(self) -> int:
        """Start a replacement for each worker that died, up to the count last asked for;
        return how many were started (each registered when this returns)."""
        with self._lock:
            if self._dispatcher is None or self._stopped:
                return 0
            lost = [w for w in self._running if not self._alive(w)]
            if lost:
                self._running = [w for w in self._running if w not in lost]
                self._terminate(lost)           # reaps a dead process; nothing else to stop
            n = self._target - len(self._running)
            if n <= 0:
                return 0
            self._grow(n)
            for new in self._running[-n:]:
                old = lost.pop(0) if lost else None
                self.replacements.append({"lost": None if old is None else old.index,
                                          "lost_pid": None if old is None else old.pid,
                                          "worker": new.index, "pid": new.pid,
                                          "started_s": round(new.started_s, 3)})
                log.warning("%s worker %s (pid %s) was lost; replaced by worker %d (pid %s), "
                            "registered with the dispatcher at %s in %.1f s", self.kind,
                            "?" if old is None else old.index, "?" if old is None else old.pid,
                            new.index, new.pid, self.dispatcher_address, new.started_s)
            return n

    def _supervise(self, interval_s: float) -> None:
        failures = 0
        while not self._halt.wait(interval_s * 2 ** min(failures, 6)):
            if not self._supervised:
                continue
            try:
                self.replace_lost()
                failures = 0
            except Exception as exc:  # noqa: BLE001 - keep supervising; say why
                if self._halt.is_set():
                    return
                failures += 1
                log.warning("could not replace a lost %s worker (%s); trying again in %.0f s",
                            self.kind, exc, interval_s * 2 ** min(failures, 6))

    def stop(self) -> None:
        """Stop every worker this pool started, then the dispatcher and the engine."""
        self._halt.set()        # first: a replacement waiting to register gives up
        with self._lock:
            self._stopped = True
            workers, self._running = self._running, []
            try:
                if workers:
                    self._terminate(workers)
            finally:
                try:
                    self._close_engine()
                finally:
                    dispatcher, self._dispatcher = self._dispatcher, None
                    if dispatcher is not None:
                        try:
                            dispatcher._stop()
                        except Exception:  # noqa: BLE001 - already stopped
                            pass
                    _ACTIVE.discard(self)
        supervisor = self._supervisor
        if supervisor is not None and supervisor is not threading.current_thread():
            supervisor.join(timeout=5)

    @property
    def target(self) -> str:
        """The dispatcher's address for ``distribute(service=...)`` (``grpc://host:port``)."""
        if self._dispatcher is None:
            raise WorkerPoolError(f"the {self.kind} pool is not open: use `with pool:` or "
                                  "pool.start(k) first")
        return self._dispatcher.target

    @property
    def dispatcher_address(self) -> str:
        """Where workers register (``host:port``): ``dispatcher_address=`` or this process's."""
        if self._dispatcher_address:
            return self._dispatcher_address
        port = self.target.rsplit(":", 1)[1]
        return f"{self._dispatcher_host()}:{port}"

    @property
    def workers(self) -> int:
        """How many of this pool's workers are alive now."""
        with self._lock:
            return sum(1 for w in self._running if self._alive(w))

    @property
    def startup_guess_s(self) -> float:
        """Expected seconds of one worker start before any was timed (the contract)."""
        guess = self.STARTUP_GUESS_S if self._startup_guess_s is None else self._startup_guess_s
        return min(float(guess), self.registration_timeout_s)

    def worker_rss(self) -> int | None:
        """The largest RSS among the running workers, or None where it cannot be read."""
        return None

    @property
    def worker_info(self) -> list[WorkerInfo]:
        with self._lock:
            return list(self._running)

    def registered(self) -> int:
        """How many workers the dispatcher counts (a stopped worker counts until the
        dispatcher's ``worker_timeout_ms`` passes without its heartbeat)."""
        return int(self._dispatcher._num_workers()) if self._dispatcher is not None else 0

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(max_workers={self.max_workers}, "
                f"cores_per_worker={self.cores_per_worker}, running={len(self._running)})")

    def _local_rss(self) -> int:
        """The largest RSS of the running workers' processes on this machine (psutil)."""
        import psutil

        largest = 0
        for info in list(self._running):
            try:
                largest = max(largest, psutil.Process(info.pid).memory_info().rss)
            except (psutil.Error, TypeError, ValueError):
                pass
        return largest

    # -- the bounded wait, shared -------------------------------------------------------------
    def _grow(self, n: int) -> None:
        launched: list[WorkerInfo] = []
        t0 = time.monotonic()
        deadline = t0 + self.registration_timeout_s
        try:
            for _ in range(n):
                taken = {w.slot for w in self._running + launched}
                info = WorkerInfo(index=self._next_index,
                                  slot=min(set(range(len(taken) + 1)) - taken))
                self._next_index += 1
                launched.append(info)
                self._launch(info)
            pending = list(launched)
            delay = 0.02
            while True:
                for info in list(pending):
                    if self._ready(info):            # raises WorkerPoolError if it died
                        info.started_s = time.monotonic() - t0
                        pending.remove(info)
                if not pending and (self._dispatcher_address
                                    or self.registered() >= len(self._running) + n):
                    break
                if self._halt.is_set():
                    raise WorkerPoolError(f"the {self.kind} pool is stopping")
                if time.monotonic() >= deadline:
                    raise WorkerPoolError(
                        f"{len(pending) or n} of {n} {self.kind} worker(s) did not register with "
                        f"the tf.data dispatcher at {self.dispatcher_address} within "
                        f"registration_timeout_s={self.registration_timeout_s:g} s (the "
                        f"dispatcher counts {self.registered()}). Fix: check that workers "
                        "can reach that address (give the pool dispatcher_address= with the "
                        "trainer's routable host:port: LocalProcessPool(...) or RayPool(...) "
                        "from intune_flow.scaleout.pools, passed as workers=), that there are "
                        "free CPUs for them"
                        f"{self._capacity_hint()}, or raise registration_timeout_s."
                        f"{self._diagnose(pending[0] if pending else launched[0])}")
                time.sleep(delay)
                delay = min(delay * 1.5, 0.25)
        except BaseException:
            self._terminate(launched)
            raise
        self._running.extend(launched)

    # -- what an implementation provides -----------------------------------------------------
    def _open_engine(self) -> None:
        """Start or connect to the engine that runs workers (nothing for local processes)."""

    def _close_engine(self) -> None:
        """Undo :meth:`_open_engine`."""

    def _dispatcher_host(self) -> str:
        return "localhost"

    def _launch(self, info: WorkerInfo) -> None:
        """Start one worker without waiting; fill ``info.handle``."""
        raise NotImplementedError

    def _ready(self, info: WorkerInfo) -> bool:
        """Whether the worker has registered (filling ``info``); raise if it died."""
        raise NotImplementedError

    def _alive(self, info: WorkerInfo) -> bool:
        raise NotImplementedError

    def _terminate(self, workers: list[WorkerInfo]) -> None:
        """Stop these workers: gracefully, then by force; never raise for one already gone."""
        raise NotImplementedError

    def _diagnose(self, info: WorkerInfo) -> str:
        """A sentence about why ``info`` did not register (its log), or ''."""
        return ""

    def _capacity_hint(self) -> str:
        return ""


# -- SIGTERM and interpreter exit: stop whatever pools still run ------------------------------
_ACTIVE: "weakref.WeakSet[WorkerPool]" = weakref.WeakSet()
_SIGTERM_LOCK = threading.Lock()
_SIGTERM_INSTALLED = False


#: How long a SIGTERM waits for the main thread to exit before the watcher stops the pools
#: and ends the process itself (the main thread is then stuck in native code: a tf.data read).
SIGTERM_GRACE_S = 10.0


def _on_sigterm(signum, frame):
    """SIGTERM while pools run: raise in the main thread so ``with``/``finally`` stop them."""
    raise SystemExit(128 + signal.SIGTERM)


def _install_sigterm() -> None:
    global _SIGTERM_INSTALLED
    with _SIGTERM_LOCK:
        if _SIGTERM_INSTALLED or threading.current_thread() is not threading.main_thread():
            return
        try:
            if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
                signal.signal(signal.SIGTERM, _on_sigterm)
                _watch_sigterm()
            _SIGTERM_INSTALLED = True
        except (ValueError, OSError):   # not the main interpreter / thread
            pass


def _watch_sigterm() -> None:
    """Make the SIGTERM this module took over from the default end the process even while
    the main thread is stuck in native code, where no Python handler runs (a read of a
    tf.data service epoch that waits for a worker that is gone): a thread learns of the
    signal through the wakeup fd and, when the process still runs ``SIGTERM_GRACE_S`` later,
    stops the pools and exits with 143. Left out where someone else holds the wakeup fd (an
    asyncio loop)."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    held = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    if held != -1:
        signal.set_wakeup_fd(held)     # not ours to replace
        os.close(read_fd)
        os.close(write_fd)
        return

    def watch():
        while True:
            got = os.read(read_fd, 64)
            if signal.SIGTERM in got:
                break
        time.sleep(SIGTERM_GRACE_S)
        log.warning("SIGTERM: the main thread did not exit within %.0f s (stuck in native "
                    "code); stopping the worker pools and exiting", SIGTERM_GRACE_S)
        _stop_all()
        os._exit(128 + signal.SIGTERM)

    threading.Thread(target=watch, name="intune-flow-sigterm", daemon=True).start()


@atexit.register
def _stop_all() -> None:
    for pool in list(_ACTIVE):
        try:
            pool.stop()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


def cpu_share(index: int, cores_per_worker: int, available: list[int] | None = None) -> tuple[int, ...]:
    """The cores worker ``index`` is pinned to: consecutive shares of this process's CPUs,
    round-robin when workers x cores exceed them (workers then share cores)."""
    cpus = sorted(available if available is not None else os.sched_getaffinity(0))
    n = len(cpus)
    return tuple(sorted({cpus[(index * cores_per_worker + j) % n] for j in range(cores_per_worker)}))
