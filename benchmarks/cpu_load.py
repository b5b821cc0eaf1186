"""Other processes keeping a share of the CPU busy: a shared machine, made repeatable.

``with cpu_load(0.25, cores=2): tune(...)`` runs ``tune()`` while busy-loops at a duty cycle
hold a quarter of two cores, the way a neighbour's job or a hypervisor's steal would. The
loops run in spawned processes (never forked from a process TensorFlow has threads in) and
stop when the block ends, also when it raises, and when the process that started them is
killed (no ``finally`` runs then: each loop watches for its parent to go).
"""

from __future__ import annotations

import math
import multiprocessing
import os
import time
from contextlib import contextmanager

PERIOD_S = 0.01
"""One busy-then-sleep cycle: short next to a measurement window, so every window of the
tuner sees the same load."""
START_TIMEOUT_S = 30.0


def _busy(duty: float, started, stop, parent: int) -> None:
    started.release()
    while not stop.is_set() and os.getppid() == parent:
        t = time.perf_counter()
        while time.perf_counter() - t < PERIOD_S * duty:
            pass
        time.sleep(PERIOD_S * (1 - duty))


@contextmanager
def cpu_load(share: float, cores: float):
    """Keep ``share`` (0..1) of ``cores`` busy from other processes while the block runs:
    one busy-loop per core the load needs, each at the duty cycle that adds up to it. A
    ``share`` of 0 starts nothing."""
    if not 0 <= share < 1:
        raise ValueError(f"cpu_load share must be in [0, 1), got {share!r}; e.g. 0.25")
    if share == 0:
        yield
        return
    loops = max(1, math.ceil(share * cores))
    duty = share * cores / loops
    ctx = multiprocessing.get_context("spawn")
    started, stop = ctx.Semaphore(0), ctx.Event()
    procs = [ctx.Process(target=_busy, args=(duty, started, stop, os.getpid()), daemon=True)
             for _ in range(loops)]
    try:
        for p in procs:
            p.start()
        for _ in procs:
            if not started.acquire(timeout=START_TIMEOUT_S):
                raise RuntimeError(f"a cpu_load process did not start in {START_TIMEOUT_S:g} s")
        yield
    finally:
        stop.set()
        for p in procs:
            if p.pid is not None:
                p.join(5)
                if p.is_alive():
                    p.kill()
                    p.join()
