"""The cluster environment interface every scale-out method talks to (simulator or real).

A cluster env runs one training job's input pipeline: a prefix on K data workers
(tf.data service workers, each running the whole prefix on its share) and a
suffix on the trainer. K = 0 runs everything on the trainer. The env owns the
clock (wall seconds on a real cluster, simulated seconds in the simulator):
starting workers, tuning a node and measuring all spend it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Mapping, Protocol, runtime_checkable

from ..env import TuningEnv
from ..knobs import KnobSpace
from .cost import CostModel


@dataclass
class ClusterMeasurement:
    """One measurement window of the whole job at K workers and one per-worker config."""

    workers: int
    config: dict[str, int]
    delivered: float = 0.0          # records/s reaching the accelerator (at most ``demand``)
    demand: float = 0.0             # records/s the accelerator would consume
    worker_util: float = 0.0        # mean busy share of the workers' pipelines (node level), 0..1
    trainer_wait: float = 0.0       # share of accelerator time spent waiting for input, 0..1
    per_hour: float = 0.0           # dollars per hour of this cluster
    seconds: float = 0.0            # clock seconds the window took
    status: str = "ok"
    error: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict:
        return asdict(self)


@runtime_checkable
class ClusterEnv(Protocol):
    """What a scale-out search needs from a cluster (issue 18 plugs in real workers here).

    * ``space``: the prefix pipeline's knobs (one config runs on every worker: tf.data
      service ships one graph to all of them);
    * ``cost``: the prices; ``max_workers``: the most workers the cluster can start;
    * ``set_workers(k)``: start or stop workers until ``k`` run, waiting for them to
      register; returns the clock seconds it took (start-ups are the expensive part);
    * ``workers()``: how many run now (fewer than asked after a worker is lost);
    * ``measure(config)``: one window of the job at the current K with ``config`` on
      every worker (on the trainer when K = 0); AUTOTUNE values go to the framework;
    * ``node_env(k)``: a :class:`~intune_flow.env.TuningEnv` for the node that runs the
      prefix (one running worker when ``k >= 1``, the trainer when ``k == 0``), sharing
      this env's clock: the node-level agent tunes the per-worker knobs through it;
    * ``clock()``: seconds spent so far.
    """

    space: KnobSpace
    cost: CostModel
    max_workers: int

    def set_workers(self, k: int) -> float: ...

    def workers(self) -> int: ...

    def measure(self, config: Mapping[str, int]) -> ClusterMeasurement: ...

    def node_env(self, k: int) -> TuningEnv: ...

    def clock(self) -> float: ...
