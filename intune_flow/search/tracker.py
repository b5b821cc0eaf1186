"""Budget, history and best-so-far bookkeeping shared by every search method (:class:`Tracker`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ..agent.walk import config_key
from ..measurement import STATUS_ERROR, Measurement


@dataclass
class SearchOutcome:
    """What a search found: the best measured config, the start, every measurement.

    ``best`` is one of ``history`` (its throughput one measured window); ``extra``
    holds the method's notes (:meth:`Tracker.note`).
    """

    best: Measurement
    start: Measurement
    history: list[Measurement]
    policy_state: dict | None
    steps: int
    seconds: float
    stopped: str          # "budget" | "steps" | "converged" | "done" | "error"
    method: str = ""
    extra: dict = field(default_factory=dict)


STOP_REASONS = ("budget", "steps", "converged", "done", "error")


class BudgetSpent(Exception):
    """Raised by :meth:`Tracker.measure` when no measurement fits in the budget any more."""


class Tracker:
    """Measures through the env, spending the budget against ``env.clock()``.

    ``steps`` counts measurements after the start. A measurement is refused when
    the steps are used up or when another one (at the mean cost so far) would
    pass ``budget_s``; the first step after the start runs whenever the start left
    any of the budget (so a budget may be passed by at most that one measurement).

    What a method does with it (nothing else is set on it; ``__slots__`` holds to that):

    * :meth:`measure` a config: every measurement lands in ``history`` and the best
      one that ran (the highest throughput) is ``best``. A refused measurement raises
      :class:`BudgetSpent`, sets the stop reason to ``"budget"`` or ``"steps"`` and
      measures nothing. A method lets it propagate (``run_search`` catches it and
      returns the outcome) or catches it to finish up; a method that must not ask
      its algorithm for a config it cannot measure checks :meth:`can_measure` first.
    * :meth:`stop` with a reason (one of ``STOP_REASONS``) when it ends on its own.
      The last reason wins: a measurement refused later still says ``"budget"``.
    * :meth:`note` a figure for ``SearchOutcome.extra`` (``autotune_rounds``,
      ``rebased_at``, ``final_cores``, ``best_mean``, ``best_looks``, ``chosen_by``).
    * :meth:`set_best` to another of its measurements (a re-measure chose it), and
      :meth:`rebase` when the machine changed and earlier results no longer count.
    * :meth:`reuse` a measurement handed in as ``known`` (taken on this env just before the
      search) instead of measuring its config again.

    ``best`` and ``start`` are always measurements of this search (or handed in as
    ``known``), never made up.
    """

    __slots__ = ("env", "method", "budget_s", "max_steps", "progress", "t0", "_history",
                 "_start", "_best", "_steps", "_stopped", "_notes", "_rebased_at", "_known")

    def __init__(self, env, method: str, budget_s: float, max_steps: int | None, progress,
                 known=()):
        self.env, self.method = env, method
        self.budget_s = float(budget_s)
        self.max_steps = max_steps
        self.progress = progress
        self.t0 = env.clock()
        self._history: list[Measurement] = []
        self._start: Measurement | None = None
        self._best: Measurement | None = None
        self._steps = 0
        self._stopped = "done"
        self._notes: dict = {}
        self._rebased_at = 0
        self._known = {config_key(m.config): m for m in known if m.ok}

    @property
    def history(self) -> tuple[Measurement, ...]:
        """Every measurement so far, the start first."""
        return tuple(self._history)

    @property
    def start(self) -> Measurement | None:
        return self._start

    @property
    def best(self) -> Measurement | None:
        """The best measurement that ran (since the last :meth:`rebase`, or as set by
        :meth:`set_best`); the start, even if it failed, until another one runs."""
        return self._best

    @property
    def steps(self) -> int:
        return self._steps

    @property
    def stopped(self) -> str:
        return self._stopped

    @property
    def rebased_at(self) -> int:
        """Index in ``history`` of the first measurement on the current machine (0: no rebase)."""
        return self._rebased_at

    def stop(self, reason: str) -> None:
        """Record why the method ended (``"converged"``, ``"budget"``, ...)."""
        if reason not in STOP_REASONS:
            raise ValueError(f"unknown stop reason {reason!r}; use one of {STOP_REASONS}")
        self._stopped = reason

    def note(self, key: str, value) -> None:
        """Record ``value`` under ``key`` in the outcome's ``extra``."""
        self._notes[key] = value

    def set_best(self, m: Measurement) -> None:
        """Make ``m``, one of this search's measurements, the best."""
        self._check_measured(m)
        self._best = m

    def rebase(self, m: Measurement) -> None:
        """The machine changed: ``m`` (measured on the new one) is the best when it ran,
        and later comparisons (``best``, ``rebased_at``) count from after it was taken."""
        self._check_measured(m)
        if m.ok:
            self._best = m
        self._rebased_at = len(self._history)
        self.note("rebased_at", self._rebased_at)

    def _check_measured(self, m: Measurement) -> None:
        if not any(m is h for h in self._history):
            raise ValueError("not a measurement of this search: the best must be measured")

    def elapsed(self) -> float:
        return self.env.clock() - self.t0

    def mean_cost(self) -> float:
        costs = [m.seconds for m in self._history if m.seconds > 0 and not m.same_as]
        return sum(costs) / len(costs) if costs else 0.0

    def can_measure(self) -> bool:
        if self.max_steps is not None and self._steps >= self.max_steps:
            self._stopped = "steps"
            return False
        if self._steps == 0 and self.elapsed() < self.budget_s:
            return True   # a budget the start did not spend holds one step: a search, not a probe
        if self.elapsed() + self.mean_cost() > self.budget_s + 1e-9:
            self._stopped = "budget"
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
        """Measure ``config`` (an env that raises gives an error measurement); raises
        :class:`BudgetSpent` when refused. ``start=True`` is run_search's, once."""
        if not start and not self.can_measure():
            raise BudgetSpent()
        try:
            m = self.env.measure(dict(config))
        except Exception as exc:  # an env that raises: record, penalize, go on
            m = Measurement(config=dict(config), status=STATUS_ERROR, error=repr(exc))
        if not start:
            self._steps += 1
        self._take(m, start)
        return m

    def reuse(self, config: Mapping[str, int], *, start: bool = False) -> Measurement | None:
        """The ``known`` measurement of ``config`` (once), taken into the history as if
        measured now but costing no step (``start=True``: as the start); None where there
        is none."""
        m = self._known.pop(config_key(config), None)
        if m is not None:
            self._take(m, start)
        return m

    def _take(self, m: Measurement, start: bool) -> None:
        self._history.append(m)
        if start:
            self._start = m
        best = self._best
        if best is None or (m.ok and (not best.ok or m.throughput > best.throughput)):
            self._best = m
        self.emit("measure", m)

    def emit(self, event: str, m: Measurement | None = None, **kw) -> None:
        best = self.best.throughput if self.best is not None and self.best.ok else 0.0
        ev = {"event": event, "method": self.method, "step": self.steps,
              "elapsed": self.elapsed(), "best": best,
              "config": dict((m or self.best).config) if (m or self.best) else {},
              "throughput": m.throughput if m else best, "status": m.status if m else "ok", **kw}
        self.progress(ev)

    def outcome(self, policy_state=None) -> SearchOutcome:
        """The search's result; its ``extra`` holds the notes."""
        looks = {k: self._notes[k] for k in ("best_mean", "best_looks", "chosen_by",
                                             "tie_broken") if k in self._notes}
        self.emit("done", self.best, stopped=self.stopped, **looks)
        return SearchOutcome(best=self.best, start=self.start, history=list(self._history),
                             policy_state=policy_state, steps=self.steps, seconds=self.elapsed(),
                             stopped=self.stopped, method=self.method, extra=dict(self._notes))
