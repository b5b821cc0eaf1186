"""The exact best (K, per-worker config) of a simulated job under an objective.

For a fixed K every term of :func:`~intune_flow.sim.cluster.aggregate` is
non-decreasing in each worker's rate, and the objective improves with the records
delivered at a fixed K, so the best config of every worker is the one with the
highest standalone rate: the single-node oracle on the worker class (on the
trainer for K = 0). What is left is a scan over K = 0..cap. A test checks this
against brute force over every combination of per-worker configs, different
configs on different workers included, on small pipelines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..scaleout.cost import Objective
from .cluster import ClusterJob, aggregate, node_pipeline, node_rate
from .oracle import oracle_pipeline


@dataclass(frozen=True)
class ClusterPick:
    """A (K, config) with its noise-free outcome."""

    workers: int
    config: dict
    delivered: float
    value: float            # the objective's loss (lower is better)
    per_million: float      # dollars per million records trained
    limit: str


def evaluate_pick(job: ClusterJob, k: int, config: Mapping[str, int],
                  objective: Objective = Objective()) -> ClusterPick:
    """The noise-free outcome of ``k`` workers (trainer only when 0) all at ``config``."""
    r = node_rate(node_pipeline(job, k), config)
    return _pick(job, k, dict(config), r, objective)


def _pick(job, k, config, rate, objective) -> ClusterPick:
    agg = aggregate(job, [rate] * k, trainer_rate=rate)
    return ClusterPick(workers=k, config=config, delivered=agg.delivered,
                       value=objective.value(job.cost, k, agg.delivered, job.demand),
                       per_million=job.cost.per_million(k, agg.delivered, job.demand),
                       limit=agg.limit)


def node_oracles(job: ClusterJob) -> tuple[tuple[dict, float], tuple[dict, float]]:
    """((trainer config, rate), (worker config, rate)): the single-node oracle on each class."""
    return oracle_pipeline(node_pipeline(job, 0)), oracle_pipeline(node_pipeline(job, 1))


def cost_curve(job: ClusterJob, objective: Objective = Objective(),
               configs: tuple[Mapping, Mapping] | None = None) -> list[ClusterPick]:
    """The outcome at every K = 0..cap with ``configs`` = (trainer config, worker config)
    (default: the single-node oracles, which makes the curve's minimum the oracle)."""
    if configs is None:
        (c0, r0), (cw, rw) = node_oracles(job)
    else:
        c0, cw = (dict(c) for c in configs)
        r0, rw = node_rate(node_pipeline(job, 0), c0), node_rate(node_pipeline(job, 1), cw)
    cap = objective.cap(job.max_workers)
    return [_pick(job, k, c0 if k == 0 else cw, r0 if k == 0 else rw, objective)
            for k in range(cap + 1)]


def cluster_oracle(job: ClusterJob, objective: Objective = Objective()) -> ClusterPick:
    """The best (K, config) of ``job`` under ``objective``; ties go to the smaller K."""
    return min(cost_curve(job, objective), key=lambda p: (p.value, p.workers))
