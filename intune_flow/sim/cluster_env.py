"""``SimClusterEnv``: the cluster simulator behind the :class:`~intune_flow.scaleout.env.ClusterEnv`
interface."""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

from ..scaleout.env import ClusterMeasurement
from .cluster import ClusterJob, aggregate, node_pipeline, node_rate, resolve
from .env import SimEnv

START_JITTER = (0.8, 1.3)
"""Each start-up takes the job's ``startup_s`` times a log-uniform factor in this range;
starting several workers at once waits for the slowest."""


class SimClusterEnv:
    """A :class:`ClusterJob` on a simulated clock, with noisy measurements.

    Starting workers costs the job's start-up time (randomized per start), removing
    them ``remove_s``, a measurement window ``window_s``; node-level tuning runs on
    :class:`~intune_flow.sim.SimEnv` instances whose clocks add to this one.
    ``events`` is a list of ``(clock_seconds, kind, value)``: ``("demand", D)`` swaps
    the accelerator (its demand becomes ``D``), ``("lose", n)`` loses ``n`` workers;
    each applies once the clock passes its time (or call :meth:`set_demand`,
    :meth:`lose_workers`).
    """

    def __init__(self, job: ClusterJob, *, seed: int | None = 0, window_s: float = 10.0,
                 remove_s: float = 2.0, events: Sequence[tuple[float, str, float]] = ()):
        self.job = job
        self.space = job.prefix.space
        self.cost = job.cost
        self.max_workers = job.max_workers
        self.window_s, self.remove_s = window_s, remove_s
        self._rng = np.random.default_rng(seed)
        self._k = 0
        self._clock = 0.0
        self._nodes: list[SimEnv] = []
        self._events = sorted(events, key=lambda e: e[0])
        self.started = 0
        self.measurements = 0

    # -- clock and events ----------------------------------------------------------
    def clock(self) -> float:
        return self._clock + sum(e.clock() for e in self._nodes)

    def _advance(self, seconds: float) -> None:
        self._clock += seconds
        self._apply_events()

    def _apply_events(self) -> None:
        now = self.clock()
        while self._events and self._events[0][0] <= now:
            _, kind, value = self._events.pop(0)
            if kind == "demand":
                self.set_demand(value)
            elif kind == "lose":
                self.lose_workers(int(value))
            else:
                raise ValueError(f"unknown cluster event {kind!r}")

    def set_demand(self, demand: float) -> None:
        """A different accelerator from now on: it consumes up to ``demand`` records/s."""
        self.job = self.job.with_demand(demand)

    def lose_workers(self, n: int = 1) -> None:
        """``n`` workers die (preempted, OOM-killed): the job runs on with fewer."""
        self._k = max(0, self._k - int(n))

    # -- the ClusterEnv interface --------------------------------------------------
    def workers(self) -> int:
        self._apply_events()
        return self._k

    def set_workers(self, k: int) -> float:
        k = max(0, min(int(k), self.max_workers))
        self._apply_events()
        if k > self._k:
            draws = self._rng.uniform(*np.log(START_JITTER), size=min(k - self._k, 8))
            seconds = self.job.startup_s * float(np.exp(draws.max()))
            self.started += k - self._k
        elif k < self._k:
            seconds = self.remove_s
        else:
            return 0.0
        self._k = k
        self._advance(seconds)
        return seconds

    def measure(self, config: Mapping[str, int]) -> ClusterMeasurement:
        self._apply_events()
        job, k = self.job, self._k
        p = node_pipeline(job, k)
        cfg = resolve(p, config)
        r = node_rate(p, cfg)
        self.measurements += 1
        per_hour = self.cost.per_hour(k)
        if r <= 0:
            self._advance(self.window_s / 4)
            return ClusterMeasurement(workers=k, config=cfg, demand=job.demand, trainer_wait=1.0,
                                      per_hour=per_hour, seconds=self.window_s / 4, status="oom",
                                      error="the prefix passed the node's RAM budget")
        agg = aggregate(job, [r] * k, trainer_rate=r)
        noisy = agg.capacity * float(math.exp(self._rng.normal(0.0, job.noise)))
        delivered = min(noisy, job.demand)
        self._advance(self.window_s)
        return ClusterMeasurement(
            workers=k, config=cfg, delivered=delivered, demand=job.demand,
            worker_util=min(1.0, delivered / max(agg.compute, 1e-12)),
            trainer_wait=max(0.0, 1.0 - delivered / job.demand), per_hour=per_hour,
            seconds=self.window_s, extra={"limit": agg.limit})

    def node_env(self, k: int) -> SimEnv:
        """A single-node env of the prefix node: a running worker (``k >= 1``) or the trainer."""
        if k >= 1 and self.workers() < 1:
            raise RuntimeError("node_env(k >= 1) needs a running worker; call set_workers first")
        env = SimEnv(node_pipeline(self.job, k), seed=int(self._rng.integers(2**31)))
        self._nodes.append(env)
        return env
