"""The queueing model of a staged input pipeline: what a config yields on N cores and R bytes.

A pipeline is a chain of stages. A stage *call* (one read of a chunk, one map of a
record, one transform of a batch) costs ``cpu`` core-seconds and ``io`` seconds of
blocking wait, handles ``records`` records and holds ``mem`` bytes while in flight.
With ``q`` concurrent calls a stage delivers at most ``q * records / (cpu + io)``
records/s (Little's law). On top of that:

* a shared thread pool of ``T`` threads (tf.data's private pool) caps the calls in
  flight over all parallel stages: ``X <= T / sum(svc_i / records_i)``;
* the cores cap the CPU work: ``X <= C * eta / W`` with ``W`` the core-seconds per
  record; ``eta < 1`` when runnable threads exceed the cores (context switches,
  cache thrash): ``eta = 1 / (1 + kappa * max(0, runnable / C - 1))``;
* buffers absorb stage-time variability: a buffer of ``b`` elements keeps a
  fraction ``1 - v / (1 + b)**2`` of the throughput;
* memory is a base (the process, the model) plus in-flight calls plus buffered
  elements plus thread stacks; passing the RAM budget is an OOM.

The model is a min over caps that are each monotone in the allocation, which is
what lets :mod:`intune_flow.sim.oracle` find the exact best config.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

from ..knobs import Knob, KnobSpace

THREAD_STACK_BYTES = 1 << 20  # resident part of a thread stack
INFINITE_POOL = 10**9


@dataclass(frozen=True)
class Stage:
    """One stage of the chain. ``knob`` is None for a sequential stage (one call at a time)."""

    name: str
    cpu: float          # core-seconds per call
    io: float           # blocking seconds per call (holds a thread, not a core)
    records: float      # records handled per call (a read chunk, a batch)
    mem: float          # bytes held per in-flight call
    knob: str | None = None

    @property
    def svc(self) -> float:
        return self.cpu + self.io


@dataclass(frozen=True)
class Buffer:
    """A prefetch buffer after stage ``after``, holding elements of ``elem_bytes`` bytes."""

    knob: str
    after: int
    elem_bytes: float
    variability: float  # 0..1: share of throughput lost with no buffering at all


@dataclass(frozen=True)
class SimPipeline:
    """A random (or hand-written) pipeline on a machine: stages, buffers, pool, cores, RAM."""

    stages: tuple[Stage, ...]
    buffers: tuple[Buffer, ...]
    space: KnobSpace
    cores: int
    ram_total: int
    ram_budget: int
    base_mem: float
    contention: float           # kappa: efficiency loss per unit of oversubscription
    noise: float                # sigma of the multiplicative (lognormal) measurement noise
    threads_knob: str | None = None
    seed: tuple = field(default=(), compare=False)

    def knob(self, name: str) -> Knob:
        return self.space[name]


@dataclass
class Evaluation:
    """Noise-free outcome of one config."""

    throughput: float           # records/s
    memory: float               # bytes
    cpu_util: float             # busy share of the cores, overhead included
    runnable: float             # threads wanting a core
    threads: float              # pool threads in use (or calls in flight without a pool)
    efficiency: float
    signals: dict[str, float]
    caps: dict[str, float]


def pool_size(p: SimPipeline, config: Mapping[str, int]) -> float:
    return float(config[p.threads_knob]) if p.threads_knob else float(INFINITE_POOL)


def evaluate(p: SimPipeline, config: Mapping[str, int], cores: float | None = None) -> Evaluation:
    """Throughput, memory and signals of a complete concrete config on ``cores`` cores."""
    cores = float(cores if cores is not None else p.cores)
    pool = pool_size(p, config)
    caps: dict[str, float] = {}
    par_demand = 0.0        # thread-seconds per record over parallel stages
    runnable_par = 0.0
    runnable_seq = 0.0
    work = 0.0              # core-seconds per record
    inflight_mem = 0.0
    q = {}
    for i, s in enumerate(p.stages):
        work += s.cpu / s.records
        frac_cpu = s.cpu / s.svc
        if s.knob is None:
            q[i] = 1.0
            runnable_seq += frac_cpu
        else:
            q[i] = min(float(config[s.knob]), pool)
            par_demand += s.svc / s.records
            runnable_par += q[i] * frac_cpu
        caps[s.name] = q[i] * s.records / s.svc
        inflight_mem += 2 * q[i] * s.mem        # the call and its output slot
    if p.threads_knob:
        caps["pool"] = pool / par_demand if par_demand else math.inf
    runnable = min(pool, runnable_par) + runnable_seq + 1.0   # +1: the consumer thread
    eta = 1.0 / (1.0 + p.contention * max(0.0, runnable / cores - 1.0))
    caps["cpu"] = cores * eta / work
    raw = min(caps.values())
    keep = 1.0
    buf_mem = 0.0
    signals: dict[str, float] = {}
    for b in p.buffers:
        size = float(config[b.knob])
        loss = b.variability / (1.0 + size) ** 2
        keep *= 1.0 - loss
        buf_mem += size * b.elem_bytes
        signals[b.knob] = min(1.0, 10.0 * loss)
    x = raw * keep
    for i, s in enumerate(p.stages):
        if s.knob is not None:
            signals[s.knob] = min(1.0, x * s.svc / s.records / q[i])
    threads_used = min(pool, sum(q[i] for i, s in enumerate(p.stages) if s.knob))
    if p.threads_knob:
        signals[p.threads_knob] = min(1.0, x * par_demand / pool)
    memory = p.base_mem + inflight_mem + buf_mem + (pool if p.threads_knob else 0) * THREAD_STACK_BYTES
    cpu_util = min(1.0, x * work / (cores * eta))
    return Evaluation(throughput=x, memory=memory, cpu_util=cpu_util, runnable=runnable,
                      threads=threads_used, efficiency=eta, signals=signals, caps=caps)
