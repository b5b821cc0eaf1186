"""Baselines behind the same env interface: ones, AUTOTUNE, heuristic, hill-climb, random, Optuna TPE."""

from __future__ import annotations

import numpy as np

from ..agent.allocations import hybrid_autotune
from ..agent.observation import can_autotune
from ..env import has_native_autotune, kept_from_autotune
from ..knobs import AUTOTUNE, THREAD_KINDS
from .tracker import BudgetSpent, Tracker


def _cores(env) -> int:
    return max(1, int(round(env.cpu_budget)))


def fixed_configs(tr: Tracker, configs) -> None:
    for cfg in configs:
        tr.measure(cfg)


def ones(tr: Tracker, env, rng) -> None:
    """Every knob at its minimum: the naive baseline."""
    fixed_configs(tr, [env.space.ones()])


def autotune(tr: Tracker, env, rng) -> None:
    """tf.data AUTOTUNE: every knob handed to the framework (on the sim: its hill-climb model)."""
    from ..sim import SimEnv, autotune_hillclimb
    if isinstance(env, SimEnv):
        cfg, rounds = autotune_hillclimb(env)
        tr.note("autotune_rounds", rounds)
        fixed_configs(tr, [cfg])
    else:
        fixed_configs(tr, [env.space.autotune()])


def heuristic(tr: Tracker, env, rng) -> None:
    """Plumber's HEURISTIC: every stage's parallelism (and the pool) at the core count; on
    tf.data also that pool with the stages at AUTOTUNE."""
    c = _cores(env)
    base = env.space.concretize(env.space.defaults(), env.cpu_budget)
    cfg = {k.name: (k.clamp(c) if k.kind in THREAD_KINDS else base[k.name])
           for k in env.space}
    hybrid = (hybrid_autotune(env.space, cfg, keep=kept_from_autotune(env))
              if has_native_autotune(env) else None)
    fixed_configs(tr, [cfg] + ([hybrid] if hybrid else []))


def hillclimb(tr: Tracker, env, rng) -> None:
    """Measured greedy, stage by stage: raise the busiest stage (by stage signal) while it pays."""
    best = tr.best
    tried: set = set()
    while True:
        cur = best.config
        sig = best.stage_signals or {}
        order = sorted(env.space, key=lambda k: -sig.get(k.name, 0.5))
        moves = [(k, d) for d in (1, -1) for k in order]
        improved = False
        for k, d in moves:
            v = k.step(cur[k.name], d)
            cfg = {**cur, k.name: v}
            key = tuple(sorted(cfg.items()))
            if v == cur[k.name] or key in tried:
                continue
            tried.add(key)
            m = tr.measure(cfg)
            if m.ok and m.throughput > best.throughput * 1.005:
                best, improved = m, True
                break
        if not improved:
            tr.stop("converged")
            return


def values(k, env) -> tuple[int, ...]:
    """The values a search samples for knob ``k``: its grid, and AUTOTUNE where the framework
    has its own tuner and the knob takes it (tf.data), as the agent's AUTOTUNE move can."""
    grid = k.grid()
    return grid + (AUTOTUNE,) if can_autotune(k, has_native_autotune(env)) else grid


def random_search(tr: Tracker, env, rng) -> None:
    """Uniform over each knob's values (:func:`values`: the log-spaced grid, AUTOTUNE where
    there is one), until the budget is spent."""
    choices = {k.name: values(k, env) for k in env.space}
    while True:
        tr.measure({n: int(rng.choice(v)) for n, v in choices.items()})


def optuna_tpe(tr: Tracker, env, rng) -> None:
    """Optuna's TPE over indices into each knob's values (:func:`values`; ordinal, AUTOTUNE
    last), the start told as the first trial; failures score 0."""
    import optuna
    from optuna.distributions import IntDistribution
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    grids = {k.name: values(k, env) for k in env.space}
    dists = {n: IntDistribution(0, len(g) - 1) for n, g in grids.items()}
    sampler = optuna.samplers.TPESampler(seed=int(rng.integers(2**31)), n_startup_trials=8)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    start = tr.start
    if start is not None and all(start.config.get(n) in g for n, g in grids.items()):
        study.add_trial(optuna.trial.create_trial(
            params={n: grids[n].index(start.config[n]) for n in grids}, distributions=dists,
            value=start.throughput if start.ok else 0.0))
    while True:
        if not tr.can_measure():
            raise BudgetSpent()
        trial = study.ask(dists)
        cfg = {n: grids[n][trial.params[n]] for n in grids}
        m = tr.measure(cfg)
        study.tell(trial, m.throughput if m.ok else 0.0)


BASELINES = {
    "ones": ones,
    "autotune": autotune,
    "heuristic": heuristic,
    "hillclimb": hillclimb,
    "random": random_search,
    "optuna": optuna_tpe,
}

RULES = (ones, autotune, heuristic)
"""Baselines that pick their config by a rule and measure only it: they do not search."""
