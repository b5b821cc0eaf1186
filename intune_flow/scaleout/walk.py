"""The cluster agent's walk over K: one move (start/stop workers, measure) per action.

Shared by pretraining and by the search, so the policy trains on the dynamics it
meets. Moves go from the best K so far (the anchor); a K already measured is
masked; the pick is the best measured (K, config). Money and time spent count:
the walk tracks the clock against its budget and the dollars the cluster cost
while searching.
"""

from __future__ import annotations

import math
from typing import Callable, Mapping

from .cost import Objective
from .env import ClusterEnv, ClusterMeasurement
from .observation import ACTIONS, STOP, ScaleView, action_mask, encode, target

FAILED_VALUE = 30.0
"""The loss of a window that delivered nothing (an OOM): finite, so rewards stay finite."""


class ScaleWalk:
    """Search state over K on ``env`` with ``config_for(k)`` on the prefix node(s).

    ``node_rate`` is the node level's standalone records/s of one tuned worker
    (0 if unknown); ``budget_s`` counts from ``t0`` (default: now). ``startup_guess_s`` is
    the start-up estimate until one was measured (the pool's prior on real workers).
    ``stages`` records each budget check: ``{stage, clock_s, cost_s, left_s, ran}`` (``clock_s``
    on the env's clock, as its start-ups and windows are; ``left_s`` of the budget), and
    ``checked: False`` on a start that runs whether it fits or not (restarting the pick's
    workers; a baseline's move, which no mask checked).
    """

    def __init__(self, env: ClusterEnv, objective: Objective, config_for: Callable[[int], Mapping],
                 *, budget_s: float, node_rate: float = 0.0, t0: float | None = None,
                 startup_guess_s: float = 60.0, max_moves: int = 16):
        self.env, self.objective, self.config_for = env, objective, config_for
        self.cap = objective.cap(env.max_workers)
        self.budget_s = float(budget_s)
        self.t0 = env.clock() if t0 is None else float(t0)
        self.node_rate = float(node_rate)
        self.max_moves = max_moves
        self.startups: list[float] = []
        self.startup_guess_s = startup_guess_s
        self.stages: list[dict] = []
        self.window_s = float(getattr(env, "window_s", 10.0)) + float(getattr(env, "warmup_s", 0.0))
        self.window_costs: list[float] = []     # clock seconds of the windows taken (if known)
        self.measured: dict[int, ClusterMeasurement] = {}
        self.values: dict[int, float] = {}
        self.history: list[dict] = []
        self.best: ClusterMeasurement | None = None
        self.best_value = math.inf
        self.start_value: float | None = None
        self.best_at = self.t0
        self.last: ClusterMeasurement | None = None
        self.moves = 0
        self.since_improvement = 0
        self.dollars = 0.0
        self._mark = env.clock()

    # -- bookkeeping -------------------------------------------------------------------
    def value(self, m: ClusterMeasurement) -> float:
        if not m.ok:
            return FAILED_VALUE
        return min(FAILED_VALUE,
                   self.objective.value(self.env.cost, m.workers, m.delivered, m.demand))

    def spend(self) -> None:
        now = self.env.clock()
        self.dollars += self.env.cost.per_hour(self.env.workers()) * (now - self._mark) / 3600
        self._mark = now

    def elapsed(self) -> float:
        return self.env.clock() - self.t0

    def startup_estimate(self) -> float:
        return (sum(self.startups) / len(self.startups)) if self.startups else self.startup_guess_s

    def window_cost(self) -> float:
        """Estimated seconds of one window: the nominal one, or the mean taken if longer."""
        taken = self.window_costs
        return max(self.window_s, sum(taken) / len(taken)) if taken else self.window_s

    def move_cost(self, k: int) -> float:
        """Estimated seconds to move to ``k`` workers and measure there."""
        return self.window_cost() + (self.startup_estimate() if k > self.env.workers() else 2.0)

    def fits(self, k: int) -> bool:
        """Whether moving to ``k`` and measuring there fits what is left of the budget."""
        return self.elapsed() + self.move_cost(k) <= self.budget_s

    def affords(self, stage: str, cost_s: float, *, checked: bool = True) -> bool:
        """Whether a stage estimated at ``cost_s`` fits what is left; recorded in ``stages``.
        ``checked=False``: the stage runs whether it fits or not (recorded as ran, unchecked)."""
        left = self.budget_s - self.elapsed()
        fits = cost_s <= left
        entry = {"stage": stage, "clock_s": round(self.env.clock(), 3), "cost_s": round(cost_s, 3),
                 "left_s": round(left, 3), "ran": fits or not checked}
        if not checked:
            entry["checked"] = False
        self.stages.append(entry)
        return fits

    def record(self, m: ClusterMeasurement) -> None:
        """Take a measurement (made by anyone on this env) into the walk."""
        self.spend()
        if m.seconds > 0:
            self.window_costs.append(float(m.seconds))
        v = self.value(m)
        self.measured[m.workers] = m
        self.values[m.workers] = v
        self.last = m
        self.history.append({"clock": self.env.clock(), "workers": m.workers, "value": v,
                             "delivered": m.delivered, "demand": m.demand})
        if self.start_value is None:
            self.start_value = v
        if v < self.best_value - 1e-3 or self.best is None:
            self.best, self.best_value, self.best_at = m, v, self.env.clock()
            self.since_improvement = 0
        else:
            self.since_improvement += 1

    def go(self, k: int) -> ClusterMeasurement:
        """Run ``k`` workers (start-ups counted) and measure the job there."""
        before = self.env.workers()
        if k > before and not self.affords(f"start {k - before} worker(s)", self.move_cost(k)):
            self.stages[-1].update(ran=True, checked=False)   # a baseline's move: not masked
        seconds = self.env.set_workers(k)
        if k > before and seconds > 0:
            self.startups.append(seconds)
        m = self.env.measure(self.config_for(self.env.workers()))
        self.record(m)
        return m

    # -- the agent's view ----------------------------------------------------------------
    def k_hat(self) -> int | None:
        """Workers that would just meet the demand at the best window's per-worker capacity."""
        b = self.best
        if b is None or not b.ok or b.delivered <= 0:
            return None
        if b.workers == 0:
            per = self.node_rate
        else:
            per = b.delivered / b.workers / max(b.worker_util, 1e-3)
        if per <= 0:
            return None
        return max(1, min(self.cap, math.ceil(b.demand / per * (1 - 1e-6))))

    def view(self) -> ScaleView:
        b, cost = self.best, self.env.cost
        a = b.workers
        last = self.last if self.last is not None and self.last is not b else None
        return ScaleView(
            anchor=a, best=b, best_value=self.best_value, start_value=self.start_value,
            values=self.values, rates={k: m.delivered for k, m in self.measured.items()},
            last_k=None if last is None else last.workers,
            last_value=None if last is None else self.values.get(last.workers),
            k_hat=self.k_hat(), node_rate=self.node_rate,
            worker_share=a * cost.worker_per_hour / cost.per_hour(a),
            price_ratio=cost.worker_per_hour / cost.trainer_per_hour, cap=self.cap,
            budget_left=max(0.0, 1 - self.elapsed() / self.budget_s),
            startup_share=self.startup_estimate() / self.budget_s,
            spent_share=self.dollars / cost.per_hour(a), moves=self.moves,
            since_improvement=self.since_improvement,
            throughput_objective=self.objective.kind == "throughput")

    def observe(self):
        """(features, mask); no move is valid once ``max_moves`` were made."""
        view = self.view()
        mask = action_mask(view, self.fits)
        if self.moves >= self.max_moves:
            mask[1:] = False
        return encode(view), mask

    def step(self, action: int) -> tuple[bool, ClusterMeasurement | None]:
        """Apply ``action``; (stopped, measurement)."""
        if action == STOP:
            return True, None
        k = target(ACTIONS[action], self.best.workers, self.k_hat(), self.cap)
        self.moves += 1
        return False, self.go(k)

    def settle(self) -> None:
        """Leave the env running the pick (the best measured K), fitting or not: recorded as
        an unchecked stage when it starts workers."""
        if self.best is not None and self.env.workers() != self.best.workers:
            k = self.best.workers
            if k > self.env.workers():
                self.affords("restart the pick's workers", self.move_cost(k), checked=False)
            self.env.set_workers(k)
            self.spend()
