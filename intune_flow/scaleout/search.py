"""``run_scaleout``: the cluster agent (InTuneX) and every baseline behind one env and budget.

The InTuneX search is nested: the node level runs inside the cluster level.

1. K = 0 at AUTOTUNE (the job as the user wrote it, all on the trainer). If it
   meets the demand, that is the cheapest config there is: stop.
2. Otherwise the node agent tunes the prefix on the trainer and K = 0 is measured
   again (a tuned trainer may meet the demand alone, or be cheapest short of it).
3. One worker is started and the node agent tunes the prefix's knobs on it; the
   config goes to every worker (tf.data service runs one graph on all of them).

Steps 2 and 3 (the worker's start, then its tuning) each run only if their estimated
cost fits what is left of the budget (``node_budget_s`` plus a window; the start-up
estimate plus a window), as every move of step 4 does; each check is in ``walk.stages``.
Where the first worker's tuning could not fit after the trainer's share, the trainer's
search takes what the worker stages would not spend (:meth:`ScaleOut.trainer_budget`).
A warm start (a cached record, or another worker class's) runs step 1 at its config instead
of all-AUTOTUNE, and the measurements it was given (the cache's verification probe) count as
the walk's own: the pick is never worse than the start, whatever the budget holds.
4. The cluster agent (a DQN over K moves) walks K from the best so far until it
   stops or the budget ends; the pick is the best measured (K, config), and the
   env is left running it.
5. Where the pick is K = 0 (short of the demand) and the budget holds a node search of
   ``REFINE_WINDOWS`` windows or more, the node agent searches the trainer again from the
   pick's config with what is left (:meth:`ScaleOut.refine_trainer`): a worker start that
   did not pay leaves budget the trainer's own search can still use.

:meth:`ScaleOut.watch` keeps measuring afterwards and re-decides K when the
demand changes (a different accelerator) or workers are lost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

from .cost import Objective
from .env import ClusterEnv, ClusterMeasurement
from .node import NODE_BUDGET_S, tune_node
from .observation import MET, meets  # noqa: F401  (MET: re-exported)
from .walk import ScaleWalk

BUDGET_S = 1800.0
CHECK_S = 0.1
"""Clock seconds kept for a budget check itself, so a stage sized to what is left still fits
when it is checked a moment later."""
REDECIDE_DEMAND = 0.1
"""watch(): a demand change of more than this share triggers a new decision on K."""
REFINE_WINDOWS = 3
"""Step 5 runs where the budget left holds a node search of at least this many windows."""


@dataclass
class ScaleOutcome:
    """What a scale-out search picked and what it cost to find."""

    method: str
    workers: int
    config: dict
    pick: ClusterMeasurement
    value: float                    # the objective's measured loss at the pick
    seconds: float                  # clock seconds the search took (start-ups included)
    pick_seconds: float             # clock seconds until the pick was first measured
    dollars: float                  # what the cluster cost while searching
    history: list[dict] = field(default_factory=list)
    stages: list[dict] = field(default_factory=list)    # the budget checks (ScaleWalk.stages)


def _outcome(method: str, walk: ScaleWalk, pick: ClusterMeasurement, t0: float) -> ScaleOutcome:
    at = next((h["clock"] for h in walk.history if h["workers"] == pick.workers), walk.best_at)
    if pick is walk.best:
        at = walk.best_at
    return ScaleOutcome(method=method, workers=pick.workers, config=dict(pick.config), pick=pick,
                        value=walk.value(pick), seconds=walk.env.clock() - t0,
                        pick_seconds=at - t0, dollars=walk.dollars, history=list(walk.history),
                        stages=list(walk.stages))


class ScaleOut:
    """The InTuneX search on one cluster env; ``policy_state`` None uses the shipped policy.

    ``node_tuner(env, k, budget_s, start=None) -> (config, rate)`` is the node level
    (default: the node agent through :func:`~intune_flow.scaleout.node.tune_node`), given
    ``node_budget_s`` (the trainer more where no worker stage could follow it:
    :meth:`trainer_budget`; ``start``: the config to search from, step 5's);
    ``choose(obs, mask) -> action`` replaces the policy (pretraining explores through it).
    The start-up estimate before one is measured is the env's ``startup_guess_s`` (a pool's
    prior), else 60 s. The budget counts from the env clock's ``t0`` (default: when the
    search starts). ``start`` is a warm start's config (every K runs it until the node agent
    tunes one; step 1 measures it instead of all-AUTOTUNE) and ``known`` measurements of this
    env the walk takes as its own before step 1 (one of K = 0 at ``start`` replaces step 1's).
    """

    def __init__(self, env: ClusterEnv, objective: Objective = Objective(), *,
                 budget_s: float = BUDGET_S, policy_state=None, node_policy=None,
                 seed: int | None = 0, node_tuner: Callable | None = None,
                 choose: Callable | None = None, node_budget_s: float = NODE_BUDGET_S,
                 t0: float | None = None, start: Mapping[str, int] | None = None,
                 known: Sequence[ClusterMeasurement] = ()):
        self.env, self.objective, self.budget_s, self.seed = env, objective, budget_s, seed
        self.t0 = t0
        self.known = list(known)
        self.node_budget_s = float(node_budget_s)
        self.node_tuner = node_tuner or (lambda e, k, b, start=None: tune_node(
            e, k, budget_s=b, policy_state=node_policy, seed=seed, start=start))
        if choose is None:
            from .dqn import ScaleDQN
            from .policy_io import load_cluster_policy
            agent = ScaleDQN(state=load_cluster_policy() if policy_state is None else policy_state,
                             seed=seed)
            choose = agent.act
        self.choose = choose
        self.configs = {0: dict(start) if start is not None else env.space.autotune()}
        self.node_rate = 0.0
        self.outcome: ScaleOutcome | None = None
        self.decisions: list[dict] = []

    def config_for(self, k: int) -> dict:
        return self.configs[0] if k == 0 else self.configs.get(1, self.configs[0])

    # -- the search ----------------------------------------------------------------------
    def walk(self, **kw) -> ScaleWalk:
        return ScaleWalk(self.env, self.objective, self.config_for, budget_s=self.budget_s,
                         startup_guess_s=getattr(self.env, "startup_guess_s", 60.0), **kw)

    def start(self) -> ScaleWalk:
        """Steps 1-3: K = 0, the node agent on the trainer, then on one worker; the walk.
        Each stage after the first window runs only if its estimate fits the budget left."""
        env = self.env
        walk = self.walk(t0=self.t0)
        for m in self.known:
            walk.record(m)
        if not any(m.workers == 0 and dict(m.config) == self.configs[0] for m in self.known):
            walk.go(0)
        if meets(walk.best):
            return walk

        def tuning(budget=self.node_budget_s):   # it may pass its budget by one measurement
            return budget + 2 * walk.window_cost()

        trainer = self.trainer_budget(walk, tuning())
        if walk.affords("tune the trainer", tuning(trainer)):
            self.configs[0], _ = self.node_tuner(env, 0, trainer)
            walk.go(0)
            if meets(walk.best):
                return walk
        if walk.cap >= 1 and walk.affords("start the first worker", walk.move_cost(1)):
            seconds = env.set_workers(1)
            walk.startups.append(seconds)
            if walk.affords("tune the worker", tuning()):
                self.configs[1], self.node_rate = self.node_tuner(env, 1, self.node_budget_s)
                walk.node_rate = self.node_rate
            walk.go(1)
        return walk

    def trainer_budget(self, walk: ScaleWalk, tuning_s: float) -> float:
        """The trainer's node budget. ``node_budget_s`` where the first worker's start and its
        tuning (``tuning_s`` each) fit after the trainer's; else the trainer also takes what
        no worker stage would spend: all that is left less two windows (its re-measure at
        K = 0, one window of slack) and ``CHECK_S`` where no worker start fits after it (or
        no worker may run), and that less the start where only the worker's tuning does not
        fit (the worker then runs the trainer's config). Where not even ``node_budget_s``
        fits, the trainer searches on what fits, at least one window: a short search still
        leaves all-AUTOTUNE far behind on most pipelines, and nothing else would spend it."""
        left = walk.budget_s - walk.elapsed()
        start = walk.move_cost(1)
        if walk.cap >= 1 and 2 * tuning_s + start <= left:
            return self.node_budget_s
        keep = 2 * walk.window_cost() + CHECK_S
        least = max(walk.window_cost(), min(self.node_budget_s, left - keep))
        if walk.cap >= 1 and tuning_s + start <= left:
            keep += start
        return max(least, left - keep)

    def decide(self, walk: ScaleWalk, on_step: Callable | None = None) -> ScaleWalk:
        """Step 4: the cluster agent's moves until it stops, the moves or the budget end."""
        while not (walk.best.workers == 0 and meets(walk.best)):
            obs, mask = walk.observe()
            if not mask[1:].any():
                break
            a = self.choose(obs, mask)
            stopped, _ = walk.step(a)
            if on_step is not None:
                on_step(obs, a, walk, stopped)
            if stopped:
                break
        return walk

    def refine_trainer(self, walk: ScaleWalk) -> None:
        """Step 5: the pick is K = 0 short of the demand: the node agent searches the trainer
        again from the pick's config, on what is left less two windows (K = 0 is measured
        again, one window of slack), where that holds ``REFINE_WINDOWS`` windows."""
        best, window = walk.best, walk.window_cost()
        if best is None or not best.ok or best.workers != 0 or meets(best):
            return
        budget = walk.budget_s - walk.elapsed() - 2 * window - CHECK_S
        if budget < REFINE_WINDOWS * window or not walk.affords("refine the trainer",
                                                                budget + 2 * window):
            return
        self.env.set_workers(0)
        config, _ = self.node_tuner(self.env, 0, budget, start=dict(best.config))
        if config != dict(best.config):
            self.configs[0] = config
            if walk.go(0) is not walk.best:     # measured worse: K = 0 keeps the pick's config
                self.configs[0] = dict(best.config)

    def search(self) -> ScaleOutcome:
        t0 = self.env.clock() if self.t0 is None else self.t0
        walk = self.decide(self.start())
        self.refine_trainer(walk)
        walk.settle()
        self.outcome = _outcome("intunex", walk, walk.best, t0)
        return self.outcome

    # -- adaptation -------------------------------------------------------------------------
    def redecide(self, m: ClusterMeasurement, reason: str) -> ScaleOutcome:
        """A new decision on K from the current state (the node configs are kept)."""
        t0 = self.env.clock()
        walk = self.walk(node_rate=self.node_rate)
        walk.record(m)
        self.decide(walk)
        walk.settle()
        out = _outcome("intunex", walk, walk.best, t0)
        self.decisions.append({"clock": t0, "reason": reason, "from_workers": m.workers,
                               "to_workers": out.workers, "demand": m.demand})
        self.outcome = out
        return out

    def watch(self, until_s: float) -> list[dict]:
        """Keep measuring the pick until the clock reads ``until_s``; re-decide K when the
        demand moves by more than ``REDECIDE_DEMAND`` or a worker is lost."""
        if self.outcome is None:
            self.search()
        while self.env.clock() < until_s:
            want, demand = self.outcome.workers, self.outcome.pick.demand
            m = self.env.measure(self.config_for(self.env.workers()))
            if m.workers < want:
                self.redecide(m, f"lost {want - m.workers} worker(s)")
            elif abs(math.log(max(m.demand, 1e-9) / demand)) > math.log1p(REDECIDE_DEMAND):
                self.redecide(m, f"demand {demand:,.0f} -> {m.demand:,.0f} records/s")
        return self.decisions


def run_scaleout(env: ClusterEnv, method: str = "intunex", *, objective: Objective = Objective(),
                 budget_s: float = BUDGET_S, seed: int | None = 0, policy_state=None,
                 node_policy=None) -> ScaleOutcome:
    """Pick K and the per-worker config of ``env``'s job with ``method`` within ``budget_s``.

    ``method`` is ``intunex`` (the cluster agent with the node agent nested) or one of
    :data:`~intune_flow.scaleout.baselines.BASELINES`.
    """
    from .baselines import BASELINES
    if method == "intunex":
        return ScaleOut(env, objective, budget_s=budget_s, policy_state=policy_state,
                        node_policy=node_policy, seed=seed).search()
    if method not in BASELINES:
        raise ValueError(f"unknown scale-out method {method!r}; choose intunex or one of "
                         f"{sorted(BASELINES)}")
    t0 = env.clock()
    walk = ScaleWalk(env, objective, lambda k: env.space.autotune(), budget_s=budget_s)
    pick = BASELINES[method](walk, np.random.default_rng(seed))
    if env.workers() != pick.workers:
        env.set_workers(pick.workers)
    walk.spend()
    return _outcome(method, walk, pick, t0)


METHODS = ("intunex", "fixed_2", "fixed_8", "fixed_32", "scale_until_flat", "demand_match",
           "utilization", "optuna")
