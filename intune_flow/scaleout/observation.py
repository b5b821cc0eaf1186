"""What the cluster agent sees and may do: K moves from the best K so far, or stop.

Every feature is relative (to the demand, the best value so far, the budget, the
prices), so jobs of any size share one scale, and everything comes from
:class:`~intune_flow.scaleout.env.ClusterMeasurement` and the node level's
standalone per-worker rate: the same encoding serves the simulator and a real
cluster.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

ACTIONS = ("stop", "demand", "zero", "half", "minus25", "minus1", "plus1", "plus25", "double",
           "quad")
STOP = 0
FEATURES = 24


def target(action: str, anchor: int, k_hat: int | None, cap: int) -> int | None:
    """The K an action leads to from ``anchor`` (None when it has no target)."""
    a = anchor
    moves = {"demand": k_hat, "zero": 0, "half": a // 2, "minus25": min(a - 1, round(0.75 * a)),
             "minus1": a - 1, "plus1": a + 1, "plus25": max(a + 2, round(1.25 * a)),
             "double": max(a + 3, 2 * a), "quad": max(4, 4 * a)}
    k = moves.get(action)
    return None if k is None else max(0, min(cap, int(k)))


@dataclass
class ScaleView:
    """The search state the observation needs (from :class:`~.walk.ScaleWalk`)."""

    anchor: int                      # best K so far
    best: object                     # its ClusterMeasurement
    best_value: float
    start_value: float
    values: dict                     # K -> measured objective value (latest)
    rates: dict                      # K -> measured delivered records/s (latest)
    last_k: int | None
    last_value: float | None
    k_hat: int | None                # K that would just meet the demand, from the best window
    node_rate: float                 # the node level's standalone records/s of one worker
    worker_share: float              # share of the price the workers make at the anchor
    price_ratio: float               # worker / trainer price
    cap: int
    budget_left: float               # 0..1
    startup_share: float             # a start-up in units of the whole budget
    spent_share: float               # dollars spent searching / an hour of the cluster at anchor
    moves: int
    since_improvement: int
    throughput_objective: bool


def _clip(x: float, lo: float, hi: float) -> float:
    return float(min(hi, max(lo, x))) if math.isfinite(x) else (hi if x > 0 else lo)


def _lk(k: int) -> float:
    return math.log2(k + 1) / 6


def _elasticity(view: ScaleView, other: int | None) -> float:
    """d log(rate) / d log(K + 1) between the anchor and another measured K."""
    if other is None:
        return 0.0
    a, ra, ro = view.anchor, view.rates[view.anchor], view.rates[other]
    if ra <= 0 or ro <= 0:
        return 0.0
    return _clip(math.log(ro / ra) / math.log((other + 1) / (a + 1)), -1.0, 2.0)


def encode(view: ScaleView) -> np.ndarray:
    """The feature vector [FEATURES] (float32)."""
    b = view.best
    f = np.zeros(FEATURES, dtype=np.float32)
    d = max(b.demand, 1e-9)
    f[0] = _clip(math.log(d / max(b.delivered, 1e-9)) / math.log(1000), 0.0, 1.0)
    f[1] = _clip(b.trainer_wait, 0.0, 1.0)
    f[2] = _clip(b.worker_util, 0.0, 1.0)
    f[3] = (_clip(b.delivered / (view.anchor * view.node_rate), 0.0, 1.5)
            if view.anchor and view.node_rate > 0 else 0.0)
    f[4] = _lk(view.anchor)
    f[5] = _lk(view.k_hat) if view.k_hat is not None else 0.0
    f[6] = (_clip(math.log((view.k_hat + 1) / (view.anchor + 1)) / 3, -1.5, 1.5)
            if view.k_hat is not None else 0.0)
    f[7] = float(view.k_hat is not None)
    f[8] = _clip(view.worker_share, 0.0, 1.0)
    f[9] = _clip(math.log(max(view.price_ratio, 1e-6)) / 5, -2.0, 1.0)
    below = max((k for k in view.rates if k < view.anchor), default=None)
    above = min((k for k in view.rates if k > view.anchor), default=None)
    f[10] = _elasticity(view, below)
    f[11] = float(below is not None)
    f[12] = _elasticity(view, above)
    f[13] = float(above is not None)
    f[14] = float(view.anchor - 1 in view.values)
    f[15] = float(view.anchor + 1 in view.values or view.anchor >= view.cap)
    if view.last_k is not None and view.last_value is not None:
        f[16] = _clip(math.log((view.last_k + 1) / (view.anchor + 1)) / 3, -1.5, 1.5)
        f[17] = _clip(view.last_value - view.best_value, 0.0, 1.0)
    f[18] = _clip(view.start_value - view.best_value, 0.0, 3.0) / 3
    f[19] = view.budget_left
    f[20] = _clip(view.startup_share * 10, 0.0, 2.0)
    f[21] = _clip(view.spent_share, 0.0, 2.0)
    f[22] = min(1.0, view.since_improvement / 4)
    f[23] = float(view.throughput_objective)
    return f


MET = 0.01
"""A window meets the demand when the accelerator waits at most this share of its time."""


def meets(m) -> bool:
    return m.ok and m.trainer_wait <= MET


def action_mask(view: ScaleView, fits) -> np.ndarray:
    """Valid actions [len(ACTIONS)]: a move whose target is new and fits the budget, or stop;
    once the best window meets the demand, no move to more workers than it has.

    ``fits(k) -> bool`` says whether moving to ``k`` and measuring fits the budget left.
    """
    mask = np.zeros(len(ACTIONS), dtype=bool)
    mask[STOP] = True
    seen = set(view.values)
    most = view.anchor if view.best is not None and meets(view.best) else view.cap
    for i, name in enumerate(ACTIONS[1:], start=1):
        k = target(name, view.anchor, view.k_hat, view.cap)
        mask[i] = k is not None and k not in seen and k <= most and fits(k)
    return mask
