"""What this process may actually use: cores (cgroup quota and affinity aware) and RAM."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import psutil

DEFAULT_RAM_FRACTION = 0.5
"""Default RAM budget: this fraction of the memory available when tuning starts (tf.data's own default)."""

RSS_MARGIN = 0.10
"""Tuning keeps the process under ``ram_budget * (1 + RSS_MARGIN)``: the probe samples RSS,
projects its growth to the next sample, checks it again at element boundaries, and stops
a config early (:mod:`intune_flow.probe`)."""


def _cgroup_cpu_limit() -> float | None:
    """CPU limit from cgroup v2 ``cpu.max`` or v1 ``cfs_quota/period``; None when unlimited."""
    v2 = Path("/sys/fs/cgroup/cpu.max")
    try:
        if v2.exists():
            quota, period = v2.read_text().split()[:2]
            if quota != "max":
                return int(quota) / int(period)
            return None
        q = Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
        p = Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us")
        if q.exists() and p.exists():
            quota = int(q.read_text())
            if quota > 0:
                return quota / int(p.read_text())
    except (OSError, ValueError):
        return None
    return None


def usable_cpus() -> float:
    """Cores this process may run on: min of CPU affinity and the cgroup quota."""
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = os.cpu_count() or 1
    limit = _cgroup_cpu_limit()
    return float(min(affinity, limit)) if limit else float(affinity)


def _cgroup_memory_limit() -> int | None:
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text != "max" and int(text) < 1 << 60:
            return int(text)
    return None


def available_ram() -> int:
    """Bytes available to this process now: system available memory, capped by the cgroup limit."""
    avail = psutil.virtual_memory().available
    limit = _cgroup_memory_limit()
    if limit:
        avail = min(avail, max(0, limit - current_rss()))
    return int(avail)


def default_ram_budget() -> int:
    """The RAM budget when none is given: current RSS plus DEFAULT_RAM_FRACTION of available memory."""
    return int(current_rss() + DEFAULT_RAM_FRACTION * available_ram())


_STATM: tuple[int, int] | None = None   # (pid, fd of /proc/<pid>/statm), reopened after a fork
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def current_rss() -> int:
    """Resident set size of this process, in bytes.

    Read from ``/proc/self/statm`` through a file descriptor kept open (a few microseconds,
    cheap enough for the probe to call at element boundaries); psutil where that is missing.
    """
    global _STATM
    try:
        pid = os.getpid()
        if _STATM is None or _STATM[0] != pid:
            _STATM = (pid, os.open(f"/proc/{pid}/statm", os.O_RDONLY | os.O_CLOEXEC))
        return int(os.pread(_STATM[1], 128, 0).split()[1]) * _PAGE
    except (OSError, ValueError, IndexError, AttributeError):
        return psutil.Process().memory_info().rss


def machine_ram() -> int:
    """Bytes of memory this process's machine has in all: physical RAM, capped by the cgroup limit."""
    total = psutil.virtual_memory().total
    limit = _cgroup_memory_limit()
    return int(min(total, limit) if limit else total)


def hardware_class(cpu_budget: float | None = None, ram: int | None = None) -> str:
    """A coarse machine class for cache keys: usable cores and a power-of-two bucket of the
    machine's memory (``ram``, default :func:`machine_ram`).

    Not the RAM budget: the default budget follows the memory free at the moment, so a
    class built on it changed between nightly runs. A cached config is probed under
    today's budget before it is used, so a smaller budget is still honoured.
    """
    cores = usable_cpus() if cpu_budget is None else cpu_budget
    return f"cpu{cores:g}-{ram_class(machine_ram() if ram is None else ram)}"


def ram_class(ram: int) -> str:
    """A power-of-two GiB bucket of ``ram`` bytes for cache keys: ``ram16g`` (``ram0g`` below
    1 GiB)."""
    gib_bucket = 2 ** max(0, math.floor(math.log2(max(ram, 1) / 2**30))) if ram >= 2**30 else 0
    return f"ram{gib_bucket}g"


CAPACITY_S = 0.2
_CHUNK = bytes(1 << 18)


def cpu_capacity(cores: float, seconds: float = CAPACITY_S) -> float:
    """MB/s of SHA-256 that ``round(cores)`` threads get through in ``seconds``: how much
    CPU this process gets on its cores right now. hashlib releases the GIL on big buffers,
    so the threads run in parallel; another busy process on the same cores lowers the
    figure about in proportion. Warm starts compare it with the figure read when the
    record was written, so that a busy machine is not taken for a slower pipeline."""
    import hashlib
    import threading

    n = max(1, round(cores))
    done = [0] * n
    deadline = time.perf_counter() + seconds

    def spin(i: int) -> None:
        while time.perf_counter() < deadline:
            hashlib.sha256(_CHUNK).digest()
            done[i] += len(_CHUNK)

    threads = [threading.Thread(target=spin, args=(i,), daemon=True) for i in range(n)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done) / 1e6 / max(1e-9, time.perf_counter() - started)


_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


def idle_cpu_seconds() -> float | None:
    """Seconds the CPUs this process may run on have spent idle (I/O wait included) since
    boot, from ``/proc/stat``: two readings bracket how many cores sat idle over a window,
    whoever kept the others busy (another process, the hypervisor's steal). None where
    ``/proc/stat`` is unreadable or does not list those CPUs (not Linux, a virtualized
    ``/proc``)."""
    try:
        cpus = {f"cpu{i}" for i in os.sched_getaffinity(0)}
        idle = 0
        with open("/proc/stat", "rb") as f:
            for line in f:
                if not line.startswith(b"cpu"):
                    break
                fields = line.split()
                name = fields[0].decode()
                if name in cpus:
                    cpus.discard(name)
                    idle += int(fields[4]) + int(fields[5])
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return idle * _TICK_S if not cpus else None


def parse_bytes(value) -> int:
    """``'4GiB'``, ``'512M'``, ``'2g'`` or an int number of bytes -> bytes."""
    if isinstance(value, bool):
        raise ValueError(f"not a memory size: {value!r}")
    if isinstance(value, (int, float)):
        if value <= 0:
            raise ValueError(f"memory size must be positive, got {value!r}")
        return int(value)
    text = str(value).strip().lower().replace(" ", "")
    units = {"": 1, "b": 1, "k": 2**10, "kb": 10**3, "kib": 2**10, "m": 2**20, "mb": 10**6,
             "mib": 2**20, "g": 2**30, "gb": 10**9, "gib": 2**30, "t": 2**40, "tb": 10**12,
             "tib": 2**40}
    num = text.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = text[len(num):]
    try:
        n = float(num)
    except ValueError:
        raise ValueError(f"not a memory size: {value!r} (use e.g. 4GiB, 512MB or bytes)") from None
    if unit not in units or n <= 0:
        raise ValueError(f"not a memory size: {value!r} (use e.g. 4GiB, 512MB or bytes)")
    return int(n * units[unit])


class WorkerProcesses:
    """Memory and CPU of the processes a pipeline starts (torchdata ``method="process"``).

    Children that exist when it is created are not the pipeline's and are left out. A
    child's memory is counted as its RSS growth since it was first seen: a forked worker
    starts out sharing its parent's pages, which its RSS counts again, so only what it
    allocates (or copies on write) after that is its own. Its CPU is all of its CPU time.
    The child list is refreshed every ``refresh_s`` (listing them scans ``/proc``); the
    figures of known children are read at every :meth:`sample`.
    """

    def __init__(self, refresh_s: float = 0.25):
        self._me = psutil.Process()
        self._before = {c.pid for c in self._children()}
        self._known: dict[int, tuple[psutil.Process, int]] = {}   # pid -> (child, first RSS)
        self._cpu: dict[int, float] = {}     # pid -> its CPU seconds when last read
        self._refresh_s, self._listed_at = refresh_s, -math.inf

    def _children(self) -> list:
        try:
            return self._me.children(recursive=True)
        except psutil.Error:
            return []

    def sample(self, now: float) -> tuple[int, float]:
        """(bytes the workers hold beyond what they shared at start, their CPU seconds)."""
        if now - self._listed_at >= self._refresh_s:
            self._listed_at = now
            for child in self._children():
                if child.pid not in self._before and child.pid not in self._cpu:
                    try:
                        self._known[child.pid] = (child, child.memory_info().rss)
                        self._cpu[child.pid] = 0.0
                    except psutil.Error:
                        pass
        extra = 0
        for pid, (child, first_rss) in list(self._known.items()):
            try:
                rss = child.memory_info().rss
                times = child.cpu_times()
            except psutil.Error:   # exited: its memory is gone, its last CPU reading stays
                del self._known[pid]
                continue
            self._cpu[pid] = times.user + times.system
            extra += max(0, rss - first_rss)
        return extra, sum(self._cpu.values())


def format_bytes(n: int) -> str:
    """Bytes as the largest exact binary unit (``2GiB``, ``512MiB``, or plain bytes): what
    :func:`parse_bytes` reads back to ``n``."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n % size == 0:
            return f"{n // size}{unit}"
    return str(n)
