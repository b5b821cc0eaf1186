"""What a cluster config costs, and the objective a scale-out search minimizes.

Prices are per hour. The defaults describe an accelerator trainer (one
GPU-class node, $4.00/h) fed by CPU workers at $0.05 per core-hour (a 16-core
worker at $0.80/h: the trainer costs five of them). The default objective is the
cost per million records trained: ``(trainer + K x worker) / min(delivered, D)``;
records the accelerator cannot consume (above its demand ``D``) are not counted.
The throughput-first objective maximizes the records trained under a worker
cap and breaks near-ties by price.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

TRAINER_PER_HOUR = 4.00
WORKER_PER_CORE_HOUR = 0.05
OBJECTIVES = ("cost", "throughput")
PRICE_TIE_WEIGHT = 0.01
"""Throughput-first objective: doubling the price counts as much as ~0.7% more records/s."""


@dataclass(frozen=True)
class CostModel:
    """Hourly prices of the trainer and of one data worker."""

    trainer_per_hour: float = TRAINER_PER_HOUR
    worker_per_hour: float = 16 * WORKER_PER_CORE_HOUR

    @classmethod
    def for_worker_cores(cls, cores: int, trainer_per_hour: float = TRAINER_PER_HOUR,
                         per_core_hour: float = WORKER_PER_CORE_HOUR) -> "CostModel":
        """Worker priced by its core count (RAM and network included in the core price)."""
        return cls(trainer_per_hour, cores * per_core_hour)

    def per_hour(self, workers: int) -> float:
        """Dollars per hour of the trainer plus ``workers`` data workers."""
        return self.trainer_per_hour + workers * self.worker_per_hour

    def per_million(self, workers: int, delivered: float, demand: float) -> float:
        """Dollars per million records trained (inf when nothing is delivered)."""
        served = min(delivered, demand)
        if served <= 0:
            return math.inf
        return self.per_hour(workers) / (served * 3600.0) * 1e6


@dataclass(frozen=True)
class Objective:
    """What a scale-out search minimizes: ``cost`` (default) or ``throughput`` under a cap.

    :meth:`value` is a loss in log units (lower is better), so ratios of configs
    read the same at any scale: ``cost`` is log dollars per million records;
    ``throughput`` is minus log records trained per second plus a small price term.
    ``max_workers`` caps K for either objective.
    """

    kind: str = "cost"
    max_workers: int | None = None

    def __post_init__(self):
        if self.kind not in OBJECTIVES:
            raise ValueError(f"unknown objective {self.kind!r}; choose one of {OBJECTIVES}")

    def cap(self, max_workers: int) -> int:
        """The largest K allowed on a cluster of ``max_workers``."""
        return max_workers if self.max_workers is None else min(max_workers, self.max_workers)

    def value(self, cost: CostModel, workers: int, delivered: float, demand: float) -> float:
        served = min(delivered, demand)
        if served <= 0:
            return math.inf
        if self.kind == "cost":
            return math.log(cost.per_million(workers, delivered, demand))
        return -math.log(served) + PRICE_TIE_WEIGHT * math.log(cost.per_hour(workers))
