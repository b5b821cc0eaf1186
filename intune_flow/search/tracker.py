"""Budget, history and best-so-far bookkeeping shared by every search method."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ..measurement import STATUS_ERROR, Measurement


@dataclass
class SearchOutcome:
    """What a search found: the best measured config, the start, every measurement."""

    best: Measurement
    start: Measurement
    history: list[Measurement]
    policy_state: dict | None
    steps: int
    seconds: float
    stopped: str          # "budget" | "steps" | "converged" | "done" | "error"
    method: str = ""
    extra: dict = field(default_factory=dict)


class BudgetSpent(Exception):
    """Raised by :meth:`Tracker.measure` when no measurement fits in the budget any more."""


class Tracker:
    """Measures through the env, spending the budget against ``env.clock()``.

    ``steps`` counts measurements after the start. A measurement is refused when
    the steps are used up or when another one (at the mean cost so far) would
    pass ``budget_s``; the first step after the start runs whenever the start left
    any of the budget (so a budget may be passed by at most that one measurement).
    """

    def __init__(self, env, method: str, budget_s: float, max_steps: int | None, progress):
        self.env, self.method = env, method
        self.budget_s = float(budget_s)
        self.max_steps = max_steps
        self.progress = progress
        self.t0 = env.clock()
        self.history: list[Measurement] = []
        self.start: Measurement | None = None
        self.best: Measurement | None = None
        self.steps = 0
        self.stopped = "done"

    def elapsed(self) -> float:
        return self.env.clock() - self.t0

    def mean_cost(self) -> float:
        costs = [m.seconds for m in self.history if m.seconds > 0]
        return sum(costs) / len(costs) if costs else 0.0

    def can_measure(self) -> bool:
        if self.max_steps is not None and self.steps >= self.max_steps:
            self.stopped = "steps"
            return False
        if self.steps == 0 and self.elapsed() < self.budget_s:
            return True   # a budget the start did not spend holds one step: a search, not a probe
        if self.elapsed() + self.mean_cost() > self.budget_s + 1e-9:
            self.stopped = "budget"
            return False
        return True

    def measurements_left(self) -> float:
        """How many more measurements fit, at the mean cost so far (inf when unknown)."""
        left = float("inf")
        if self.max_steps is not None:
            left = float(self.max_steps - self.steps)
        cost = self.mean_cost()
        if cost > 0:
            left = min(left, (self.budget_s - self.elapsed()) / cost)
        return max(0.0, left)

    def fraction_left(self) -> float:
        parts = [1 - self.elapsed() / self.budget_s if self.budget_s > 0 else 0.0]
        if self.max_steps:
            parts.append(1 - self.steps / self.max_steps)
        return max(0.0, min(parts))

    def measure(self, config: Mapping[str, int], *, start: bool = False) -> Measurement:
        if not start and not self.can_measure():
            raise BudgetSpent()
        try:
            m = self.env.measure(dict(config))
        except Exception as exc:  # an env that raises: record, penalize, go on
            m = Measurement(config=dict(config), status=STATUS_ERROR, error=repr(exc))
        self.history.append(m)
        if start:
            self.start = m
        else:
            self.steps += 1
        if m.ok and (self.best is None or not self.best.ok or m.throughput > self.best.throughput):
            self.best = m
        elif self.best is None:
            self.best = m
        self.emit("measure", m)
        return m

    def emit(self, event: str, m: Measurement | None = None, **kw) -> None:
        best = self.best.throughput if self.best is not None and self.best.ok else 0.0
        ev = {"event": event, "method": self.method, "step": self.steps,
              "elapsed": self.elapsed(), "best": best,
              "config": dict((m or self.best).config) if (m or self.best) else {},
              "throughput": m.throughput if m else best, "status": m.status if m else "ok", **kw}
        self.progress(ev)

    def outcome(self, policy_state=None, **extra) -> SearchOutcome:
        self.emit("done", self.best, stopped=self.stopped)
        return SearchOutcome(best=self.best, start=self.start, history=list(self.history),
                             policy_state=policy_state, steps=self.steps, seconds=self.elapsed(),
                             stopped=self.stopped, method=self.method, extra=extra)
