"""The scale-out rules people use, behind the same env and budget as the cluster agent.

Each takes a :class:`~intune_flow.scaleout.walk.ScaleWalk` whose per-worker config
is AUTOTUNE (the framework tunes each worker's knobs; only Optuna searches them)
and returns the measurement of the K it settles on.

* ``fixed_2``, ``fixed_8``, ``fixed_32``: a user's guess.
* ``scale_until_flat``: K = 0 if the trainer alone keeps the accelerator busy; else
  from one worker, add a worker while the last one raised the delivered rate by
  >= 5% (the common autoscaling rule, Cachew-like); keep the K before the first
  worker that did not.
* ``demand_match``: K = ceil(D / the rate one worker delivers at AUTOTUNE).
* ``utilization``: Ray Data's actor-pool autoscaler rule: from one worker, grow
  while the workers' mean utilization is above 80% and shrink below 50% (one worker
  at a time below 4, else by a quarter), until it holds or the budget ends.
* ``optuna``: TPE over (K, every knob on its grid or AUTOTUNE), one measurement per trial,
  start-ups charged to the same wall-clock budget; the pick is the best trial.
"""

from __future__ import annotations

import math

from ..knobs import AUTOTUNE
from .env import ClusterMeasurement
from .walk import ScaleWalk

FLAT_GAIN = 0.05
UTIL_HIGH, UTIL_LOW = 0.8, 0.5


def fixed(k: int):
    def run(walk: ScaleWalk, rng) -> ClusterMeasurement:
        return walk.go(min(k, walk.cap))
    run.__doc__ = f"K = {k} (capped at the cluster's maximum)."
    return run


def scale_until_flat(walk: ScaleWalk, rng) -> ClusterMeasurement:
    keep = walk.go(0)
    if keep.ok and keep.trainer_wait <= 0.01:
        return keep         # the accelerator never waits: no reason to add a worker
    keep = walk.go(min(1, walk.cap))
    while keep.workers < walk.cap and walk.fits(keep.workers + 1):
        m = walk.go(keep.workers + 1)
        if not m.ok or m.delivered < keep.delivered * (1 + FLAT_GAIN):
            break
        keep = m
    return keep


def demand_match(walk: ScaleWalk, rng) -> ClusterMeasurement:
    one = walk.go(min(1, walk.cap))
    if not one.ok or one.delivered <= 0 or one.workers == 0:
        return one
    k = min(walk.cap, max(1, math.ceil(one.demand / one.delivered * (1 - 1e-6))))
    return one if k == 1 else walk.go(k)


def utilization(walk: ScaleWalk, rng) -> ClusterMeasurement:
    m = walk.go(min(1, walk.cap))
    seen = {m.workers}
    while m.ok:
        k = m.workers
        step = 1 if k < 4 else max(1, k // 4)
        if m.worker_util > UTIL_HIGH and k < walk.cap:
            nxt = min(walk.cap, k + step)
        elif m.worker_util < UTIL_LOW and k > 1:
            nxt = max(1, k - step)
        else:
            break
        if nxt in seen or not walk.fits(nxt):
            break
        seen.add(nxt)
        m = walk.go(nxt)
    return m


def optuna_search(walk: ScaleWalk, rng) -> ClusterMeasurement:
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = walk.env.space
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(
        seed=int(rng.integers(2**31))))
    study.enqueue_trial({"workers": 0, **space.autotune()})
    best: ClusterMeasurement | None = None
    misses = 0
    while misses < 20 and walk.elapsed() < walk.budget_s:
        trial = study.ask()
        k = trial.suggest_int("workers", 0, walk.cap)
        cfg = {knob.name: trial.suggest_categorical(knob.name, [AUTOTUNE, *knob.grid()])
               for knob in space}
        if not walk.fits(k):
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            misses += 1
            continue
        misses = 0
        walk.env.set_workers(k)
        m = walk.env.measure(cfg)
        walk.record(m)
        v = walk.value(m)
        study.tell(trial, v if math.isfinite(v) else 1e9)
        if best is None or v < walk.value(best):
            best = m
    return best if best is not None else walk.go(0)


BASELINES = {"fixed_2": fixed(2), "fixed_8": fixed(8), "fixed_32": fixed(32),
             "scale_until_flat": scale_until_flat, "demand_match": demand_match,
             "utilization": utilization, "optuna": optuna_search}
