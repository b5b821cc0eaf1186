"""The cluster model: a training job fed by K data workers, each one a single-node sim.

A job's input pipeline is split in two. The *prefix* (a :class:`SimPipeline`)
runs on every data worker, as tf.data service runs the whole dataset graph on
each worker on its share of the data; its per-worker rate is the single-node
model at that worker's knobs, cores and RAM. The *suffix* (feeding, final
collation) runs on the trainer. The records that reach the accelerator per
second are the smallest of

* the workers' compute: ``sum(r_i) / (1 + alpha * (K - 1))``: dispatcher
  coordination, stragglers and shard skew make each added worker worth a bit
  less than the one before (diminishing returns, never negative);
* the workers' network: ``K * worker.net / record_bytes``;
* the trainer's network: ``trainer.net / record_bytes``;
* the trainer's CPU: ``trainer.cores / (suffix_cpu + rpc_cpu / records_per_element)``:
  the suffix plus the service's per-element receive (RPC, deserialization);
* the accelerator's demand ``D``: it consumes no more than that.

With K = 0 the prefix runs on the trainer too: the trainer's cores are shared
between prefix and suffix, ``1 / (1 / r_trainer + suffix_cpu / trainer.cores)``,
with no network or RPC term. Every term is monotone in each worker's rate,
which is what lets :mod:`intune_flow.sim.cluster_oracle` be exact.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ..knobs import AUTOTUNE
from ..scaleout.cost import CostModel
from .autotune import autotune_config
from .model import SimPipeline, evaluate


@dataclass(frozen=True)
class NodeClass:
    """A machine type: cores, RAM (bytes) and network bandwidth (bytes/s)."""

    name: str
    cores: int
    ram: int
    net: float


@dataclass(frozen=True)
class ClusterJob:
    """One training job: its prefix pipeline, worker and trainer classes, demand and prices."""

    prefix: SimPipeline         # its cores/RAM are the worker class's
    worker: NodeClass
    trainer: NodeClass          # cores and RAM the trainer gives the input pipeline
    demand: float               # records/s the accelerator consumes at most
    suffix_cpu: float           # trainer core-seconds per record for the suffix
    rpc_cpu: float              # trainer core-seconds per element received from a worker
    record_bytes: float         # bytes per record on the wire
    coordination: float         # alpha of the diminishing returns
    startup_s: float            # typical seconds for a worker to start and register
    noise: float                # lognormal sigma of an aggregate measurement
    cost: CostModel = CostModel()
    max_workers: int = 64
    seed: tuple = field(default=(), compare=False)

    @property
    def element_records(self) -> float:
        """Records per element the workers send (the batch size when the prefix batches)."""
        return float(self.prefix.stages[-1].records)

    def trainer_pipeline(self) -> SimPipeline:
        """The prefix as it runs on the trainer (K = 0): the trainer's cores and RAM."""
        ram = int(self.trainer.ram)
        return dataclasses.replace(self.prefix, cores=self.trainer.cores, ram_total=ram,
                                   ram_budget=ram // 2)

    def with_demand(self, demand: float) -> "ClusterJob":
        return dataclasses.replace(self, demand=float(demand))


def node_pipeline(job: ClusterJob, k: int) -> SimPipeline:
    """The pipeline the prefix node runs: a worker's for ``k >= 1``, the trainer's for 0."""
    return job.prefix if k >= 1 else job.trainer_pipeline()


def resolve(p: SimPipeline, config: Mapping[str, int]) -> dict[str, int]:
    """A concrete config: AUTOTUNE values replaced by what tf.data's AUTOTUNE settles on."""
    cfg = {k.name: int(config.get(k.name, k.default)) for k in p.space}
    if any(v == AUTOTUNE for v in cfg.values()):
        auto, _ = autotune_config(p, p.cores, p.ram_total)
        cfg = {n: (auto[n] if v == AUTOTUNE else v) for n, v in cfg.items()}
    return p.space.concretize(cfg, p.cores)


def node_rate(p: SimPipeline, config: Mapping[str, int]) -> float:
    """Records/s of the prefix on one node at ``config`` (0 when it passes the RAM budget)."""
    ev = evaluate(p, resolve(p, config), p.cores)
    return 0.0 if ev.memory > p.ram_budget else ev.throughput


@dataclass
class ClusterRate:
    """Noise-free outcome of K workers at given per-worker rates."""

    delivered: float            # records/s reaching the accelerator
    capacity: float             # records/s the input side could deliver without the demand cap
    compute: float              # the workers' (or, K = 0, the trainer's) pipeline capacity
    limit: str                  # the binding term: compute, worker_net, trainer_net, trainer_cpu,
                                # or demand
    caps: dict[str, float]


def aggregate(job: ClusterJob, rates: Sequence[float], trainer_rate: float = 0.0) -> ClusterRate:
    """The job's rate with one worker per entry of ``rates`` (their standalone records/s).

    An empty ``rates`` is K = 0: the prefix runs on the trainer at ``trainer_rate``.
    """
    k = len(rates)
    t = job.trainer
    if k == 0:
        x = 0.0 if trainer_rate <= 0 else 1.0 / (1.0 / trainer_rate + job.suffix_cpu / t.cores)
        caps = {"compute": x}
    else:
        caps = {"compute": sum(rates) / (1.0 + job.coordination * (k - 1)),
                "worker_net": k * job.worker.net / job.record_bytes,
                "trainer_net": t.net / job.record_bytes,
                "trainer_cpu": t.cores / (job.suffix_cpu + job.rpc_cpu / job.element_records)}
    capacity = min(caps.values())
    limit = min(caps, key=caps.get)
    if job.demand < capacity:
        limit = "demand"
    return ClusterRate(delivered=min(capacity, job.demand), capacity=capacity,
                       compute=caps["compute"], limit=limit, caps=caps)


def cluster_rate(job: ClusterJob, k: int, config: Mapping[str, int]) -> ClusterRate:
    """``aggregate`` with every one of ``k`` workers (or the trainer, k = 0) at ``config``."""
    r = node_rate(node_pipeline(job, k), config)
    return aggregate(job, [r] * k, trainer_rate=r)
