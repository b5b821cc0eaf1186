"""The real cluster: a pipeline read at the trainer through the tf.data service of a pool.

* :class:`ServicePipeline`: a :class:`~intune_flow.pipeline.Pipeline` whose builds send the
  worker side (everything up to ``knobs.split(ds)``, by default the whole dataset) to the
  pool's workers with ``distribute()``; the probe measures it at the trainer like any
  pipeline.
* :class:`ServiceClusterEnv`: the :class:`~intune_flow.scaleout.env.ClusterEnv` of one job
  on a :class:`~intune_flow.scaleout.pools.WorkerPool`: ``set_workers`` resizes the pool
  (its wall seconds, start-ups included, are the clock's), ``measure`` probes K = 0 on the
  trainer or K >= 1 through the service, ``node_env(k)`` is the node agent's env. Every
  measurement is kept (``measurements``, ``probes``).

Processing mode: ``parallel_epochs`` while tuning (each worker runs the whole worker side;
tuning reads repeated data, so no record is missing). ``serve()`` takes either mode.
"""

from __future__ import annotations

import time
from typing import Mapping

from ..pipeline import Pipeline
from ..real_env import PipelineEnv
from .cost import CostModel
from .env import ClusterMeasurement

PROCESSING_MODES = ("parallel_epochs", "distributed_epoch")
DEMAND = 1e12
"""Records/s an accelerator could consume when the user states no demand: every rate falls
short, so the cost per record is price over delivered rate (more workers pay while they
raise the rate faster than the price)."""


def distributor(target: str, processing_mode: str = "parallel_epochs", job_name=None):
    """``worker_side -> worker_side.apply(distribute(...))`` for the dispatcher ``target``."""
    if processing_mode not in PROCESSING_MODES:
        from ..errors import OptionsError

        raise OptionsError(f"processing_mode={processing_mode!r}: use one of "
                           f"{', '.join(PROCESSING_MODES)}")

    def distribute(ds):
        import tensorflow as tf

        return ds.apply(tf.data.experimental.service.distribute(
            processing_mode=processing_mode, service=target, job_name=job_name))
    return distribute


class ServicePipeline(Pipeline):
    """``base`` read through the tf.data service at ``target`` (its description reused)."""

    def __init__(self, base: Pipeline, target, processing_mode: str = "parallel_epochs"):
        super().__init__(base.factory, base.kwargs, ref=base.ref)
        self._description = base.describe()
        self.target = target                 # a str, or a callable returning the pool's target
        self.processing_mode = processing_mode

    def _build(self, desc, config, cpu_budget=None):
        target = self.target() if callable(self.target) else self.target
        return self.build_split(config, distributor(target, self.processing_mode),
                                cpu_budget=cpu_budget)


class _NodeEnv(PipelineEnv):
    """The node agent's env: one node's pipeline, on the cluster env's clock."""

    def __init__(self, cluster: "ServiceClusterEnv", pipeline, cpu_budget: float,
                 ram_budget: int, memory=None):
        super().__init__(pipeline, cpu_budget=cpu_budget, ram_budget=ram_budget,
                         window_s=cluster.window_s, warmup_s=cluster.warmup_s,
                         timeout_s=cluster.timeout_s, memory=memory)
        self.cluster = cluster

    def measure(self, config, *, window_s=None, warmup_s=None):
        m = super().measure(config, window_s=window_s, warmup_s=warmup_s)
        self.cluster.probes.append((self.cluster.workers(), m))
        return m

    def clock(self) -> float:
        return self.cluster.clock()


class ServiceClusterEnv:
    """One training job on ``pool`` (opened by the caller). ``cpu_budget``/``ram_budget``
    bound the trainer (K = 0, and the reading side); each worker gets the pool's
    ``cores_per_worker`` (pinned) and ``ram_per_worker`` (where stated; else the trainer's
    RAM budget). Prices: :meth:`CostModel.for_worker_cores`."""

    def __init__(self, pipeline: Pipeline, pool, *, cpu_budget: float, ram_budget: int,
                 window_s: float = 2.0, warmup_s: float = 0.5, timeout_s: float = 30.0,
                 cost: CostModel | None = None, demand: float = DEMAND):
        self.pipeline, self.pool = pipeline, pool
        self.cpu_budget, self.ram_budget = cpu_budget, ram_budget
        self.window_s, self.warmup_s, self.timeout_s = window_s, warmup_s, timeout_s
        self.space = pipeline.describe().search_space
        self.cost = cost or CostModel.for_worker_cores(pool.cores_per_worker)
        self.max_workers = pool.max_workers
        self.demand = float(demand)
        self.service = ServicePipeline(pipeline, lambda: pool.target)
        self.measurements: list[ClusterMeasurement] = []
        self.probes: list[tuple[int, object]] = []     # (workers, Measurement), node level too
        self.startups: list[tuple[int, int, float, float]] = []  # (from K, to K, seconds, at)
        self._start = time.perf_counter()

    def clock(self) -> float:
        return time.perf_counter() - self._start

    def workers(self) -> int:
        return self.pool.workers

    @property
    def startup_guess_s(self) -> float:
        """The pool's prior for a worker start (the walk's estimate until one is timed)."""
        return self.pool.startup_guess_s

    def set_workers(self, k: int) -> float:
        before, at, t0 = self.pool.workers, self.clock(), time.perf_counter()
        self.pool.resize(int(k))
        seconds = time.perf_counter() - t0
        if k != before:
            self.startups.append((before, int(k), seconds, at))
        return seconds

    def node_env(self, k: int) -> PipelineEnv:
        """K = 0: the trainer's budgets; K >= 1: a worker's cores, and its RAM budget where
        the pool states one and can read its workers' RSS (what the RAM guard then holds
        against it: the largest worker's); otherwise the trainer's RAM budget and RSS."""
        if k == 0:
            return _NodeEnv(self, self.pipeline, self.cpu_budget, self.ram_budget)
        cores, ram = float(self.pool.cores_per_worker), self.pool.ram_per_worker
        if ram is None or self.pool.worker_rss() is None:
            return _NodeEnv(self, self.service, cores, self.ram_budget)
        return _NodeEnv(self, self.service, cores, ram, memory=self.pool.worker_rss)

    def measure(self, config: Mapping[str, int], *, window_s: float | None = None,
                warmup_s: float | None = None) -> ClusterMeasurement:
        k = self.workers()
        m = self.node_env(k).measure(config, window_s=window_s, warmup_s=warmup_s)
        delivered = m.throughput if m.ok else 0.0
        out = ClusterMeasurement(
            workers=k, config=dict(config), delivered=delivered, demand=self.demand,
            worker_util=1.0 if k else 0.0,
            trainer_wait=max(0.0, 1.0 - delivered / self.demand),
            per_hour=self.cost.per_hour(k), seconds=m.seconds, status=m.status, error=m.error,
            extra={"cost_per_million": self.cost.per_million(k, delivered, self.demand),
                   "clock": self.clock()})
        self.measurements.append(out)
        return out
