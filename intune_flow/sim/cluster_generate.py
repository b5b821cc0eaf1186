"""Random training jobs for the cluster simulator, on the single-node generator's seed splits.

A job draws a worker class of 4-64 cores (RAM 2-8 GiB per core, network growing
with the node), a prefix pipeline on it (:func:`random_pipeline`), a trainer
giving the input pipeline 4-32 cores, an accelerator demand of 10^4 to 10^7
records/s, wire bytes per record, the suffix and per-element RPC costs, the
diminishing-returns factor, the worker start-up time (5 s to 3 min) and the
trainer's price (an accelerator node at $2-32/h, at least twice a worker; workers at
$0.05 per core-hour).
"""

from __future__ import annotations

import math

import numpy as np

from ..scaleout.cost import WORKER_PER_CORE_HOUR, CostModel
from .cluster import ClusterJob, NodeClass
from .generate import pipeline_rng, random_pipeline

WORKER_CORES = (4, 8, 16, 24, 32, 48, 64)
TRAINER_CORES = (4, 8, 16, 24, 32)
_JOB_DOMAIN = 0xC1A5


def _logu(rng, lo, hi):
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def _gbit(gbps: float) -> float:
    return gbps * 1e9 / 8


def trainer_price(rng: np.random.Generator, worker_per_hour: float) -> float:
    """An accelerator node's $/h: $2-32, and at least twice a worker's."""
    return max(_logu(rng, 2, 32), 2 * worker_per_hour)


def random_job(rng: np.random.Generator, *, worker_cores: int | None = None,
               demand: float | None = None, max_workers: int = 64) -> ClusterJob:
    """One random job (see the module docstring for the ranges)."""
    cores = int(worker_cores if worker_cores is not None else rng.choice(WORKER_CORES))
    prefix = random_pipeline(rng, cores=cores)
    worker = NodeClass(f"cpu-{cores}", cores, prefix.ram_total,
                       _gbit(min(50.0, 2.5 * max(2.0, cores / 4)) * rng.uniform(0.6, 1.0)))
    t_cores = int(rng.choice(TRAINER_CORES))
    w_price = cores * WORKER_PER_CORE_HOUR
    trainer = NodeClass(f"accel-{t_cores}", t_cores, int(t_cores * _logu(rng, 4, 16) * 2**30),
                        _gbit(float(rng.choice([25.0, 50.0, 100.0, 200.0]))))
    return ClusterJob(
        prefix=prefix, worker=worker, trainer=trainer,
        demand=float(demand if demand is not None else _logu(rng, 1e4, 1e7)),
        suffix_cpu=_logu(rng, 1e-7, 1e-5), rpc_cpu=_logu(rng, 1e-5, 1e-4),
        record_bytes=_logu(rng, 100, 20_000), coordination=_logu(rng, 0.002, 0.05),
        startup_s=_logu(rng, 5, 180), noise=rng.uniform(0.01, 0.04),
        cost=CostModel(trainer_price(rng, w_price), w_price),
        max_workers=max_workers)


def sample_job(split: str, index: int, **kwargs) -> ClusterJob:
    """``random_job`` from the split's own seed stream ("train" for pretraining, "test" for
    the benchmark, "eval" for the pretraining curve), disjoint from the node sim's pipelines."""
    base = pipeline_rng(split, index)
    rng = np.random.default_rng([_JOB_DOMAIN, int(base.integers(2**62))])
    job = random_job(rng, **kwargs)
    object.__setattr__(job, "seed", (split, int(index)))
    return job
