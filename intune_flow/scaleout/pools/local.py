"""Workers as local subprocesses on loopback, each pinned to its share of the cores."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from ...errors import OptionsError, WorkerPoolError
from .base import WorkerInfo, WorkerPool, cpu_share


def check_fits(max_workers: int, cores_per_worker: int, ram_per_worker: int | None,
               kind: str = "local") -> None:
    """Raise :class:`OptionsError` for workers on this machine (``kind`` "local", or "ray"
    for the local Ray a spec without an address starts) that it cannot hold: one worker
    given more cores than this process may use, or RAM budgets that add up past the
    machine's (workers sharing cores is allowed: they take turns)."""
    from ...resources import machine_ram, usable_cpus

    usable = int(usable_cpus())
    spec = f"{kind}:{max_workers}x{cores_per_worker}"
    if cores_per_worker > usable:
        raise OptionsError(
            f"workers={spec!r}: a {kind} worker of {cores_per_worker} cores is more than the "
            f"{usable} cores this process may use (CPU affinity / cgroup quota); {kind} "
            f"workers without a cluster address run on this machine, so give at most "
            f"{usable} per worker ('{kind}:{max_workers}x{usable}'), or use Ray workers on "
            f"other machines ('ray://HOST:PORT:{max_workers}x{cores_per_worker}')")
    if ram_per_worker:
        total = machine_ram()
        if ram_per_worker * max_workers > total:
            gib = ram_per_worker / 2**30
            raise OptionsError(
                f"workers='{spec}:{gib:g}GiB': {gib:.1f} GiB of RAM per worker x "
                f"{max_workers} {kind} workers is more than this machine's "
                f"{total / 2**30:.1f} GiB; state less per worker (e.g. "
                f"'{spec}:{max(1, int(total / max_workers / 2**30))}GiB') or fewer workers")


DIR_PREFIX = "intune-workers-"
"""A local pool's temp dir: ``intune-workers-<owner pid>-<random>``."""


def remove_stale_dirs(base: Path) -> list[Path]:
    """Remove the temp dirs of local pools whose owner process is gone (one killed by
    ``SIGKILL`` could not remove its own; its workers died with it); returns them. Only
    this user's dirs, and only where the owner pid no longer runs."""
    removed = []
    for path in base.glob(f"{DIR_PREFIX}*-*"):
        pid = path.name[len(DIR_PREFIX):].split("-", 1)[0]
        try:
            if (not pid.isdigit() or path.stat().st_uid != os.getuid()
                    or psutil.pid_exists(int(pid))):
                continue
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


TF_STARTUP = ("All log messages before absl::InitializeLog", "oneDNN custom operations are on")
"""What TensorFlow writes to every worker's log as it starts, which says nothing of a failure
(README-only trial 92's registration timeout quoted only these)."""


class LocalProcessPool(WorkerPool):
    """``max_workers`` ``WorkerServer`` subprocesses (``python -m intune_flow.scaleout.worker``)
    on 127.0.0.1, each pinned to ``cores_per_worker`` cores: the share of the lowest slot no
    running worker holds (round-robin over this process's CPUs: with more workers than
    cores they share). Each runs in its own process
    group and gets ``SIGKILL`` when the thread that started it dies (``PR_SET_PDEATHSIG``:
    start pools from a thread that outlives them, e.g. the main thread); ``stop`` sends
    ``SIGTERM`` to its group, waits ``stop_timeout_s``, then ``SIGKILL``. Logs and readiness
    files live in a temp dir the pool removes on ``stop``; one left by a killed process is
    removed when the next pool opens (:func:`remove_stale_dirs`)."""

    kind = "local"
    STARTUP_GUESS_S = 6.0    # a TensorFlow import and a registration on a quiet 2-core machine

    def __init__(self, max_workers: int, cores_per_worker: int = 1, **kwargs):
        super().__init__(max_workers, cores_per_worker=cores_per_worker, **kwargs)
        check_fits(max_workers, cores_per_worker, self.ram_per_worker)
        self._dir: Path | None = None

    def worker_rss(self) -> int:
        return self._local_rss()

    def _open_engine(self) -> None:
        remove_stale_dirs(Path(tempfile.gettempdir()))
        self._dir = Path(tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-"))

    def _close_engine(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def _launch(self, info: WorkerInfo) -> None:
        cores = cpu_share(info.slot, self.cores_per_worker)
        ready = self._dir / f"worker-{info.index}.json"
        log = open(self._dir / f"worker-{info.index}.log", "wb")
        cmd = [sys.executable, "-m", "intune_flow.scaleout.worker",
               "--dispatcher", self.dispatcher_address, "--port", "0", "--host", "127.0.0.1",
               "--cores", ",".join(map(str, cores)), "--parent-pid", str(os.getpid()),
               "--ready-file", str(ready), "--heartbeat-ms", str(self.heartbeat_ms)]
        try:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    close_fds=True)
        finally:
            log.close()
        info.pid, info.cores, info.node = proc.pid, cores, "127.0.0.1"
        info.handle = {"proc": proc, "ready": ready}

    def _ready(self, info: WorkerInfo) -> bool:
        proc, ready = info.handle["proc"], info.handle["ready"]
        if proc.poll() is not None:
            raise WorkerPoolError(
                f"local worker {info.index} (pid {proc.pid}) exited with status "
                f"{proc.returncode} before it registered with the dispatcher at "
                f"{self.dispatcher_address}.{self._diagnose(info)} Fix: run "
                f"`{sys.executable} -m intune_flow.scaleout.worker --help` in this environment "
                "and check that TensorFlow imports there.")
        if not ready.exists():
            return False
        data = json.loads(ready.read_text())
        info.address = data["address"]
        return True

    def _alive(self, info: WorkerInfo) -> bool:
        return info.handle is not None and info.handle["proc"].poll() is None

    def _terminate(self, workers: list[WorkerInfo]) -> None:
        procs = [w.handle["proc"] for w in workers if w.handle is not None]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for proc in procs:
                if proc.poll() is None:
                    try:
                        os.killpg(proc.pid, sig)
                    except ProcessLookupError:
                        pass
            deadline = time.monotonic() + (self.stop_timeout_s if sig == signal.SIGTERM else 30)
            for proc in procs:
                try:
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
            if all(p.poll() is not None for p in procs):
                return

    def _diagnose(self, info: WorkerInfo) -> str:
        if self._dir is None:
            return ""
        try:
            lines = (self._dir / f"worker-{info.index}.log").read_text(errors="replace").splitlines()
        except OSError:
            return ""
        own = [ln for ln in lines if ln.strip() and not any(b in ln for b in TF_STARTUP)][-3:]
        if not own:
            return (" Its log holds only TensorFlow's start-up lines: it had logged nothing of "
                    "its own." if lines else "")
        return " Its log ends: " + " | ".join(ln.strip()[:300] for ln in own)
