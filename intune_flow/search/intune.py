"""The InTune method: the pretrained DQN walks the knobs, learning online from what it measures."""

from __future__ import annotations

import numpy as np

from ..agent.allocations import (BUSY_CPU, autotune_held_back, hybrid_autotune, pool_at_cores,
                                 rescaled)
from ..agent.moves import recover, smart_start, unpin
from ..agent.walk import Walk, config_key
from ..env import has_native_autotune, kept_from_autotune
from ..knobs import AUTOTUNE
from .race import CONFIRM, confirm, confirm_count, contenders, raceable
from .tracker import BudgetSpent, Tracker

# When to stop: in the simulator, gains still come 10-20 measurements after the last one
# (benchmarks/README.md, "When the agent stops"); waiting for 20 keeps most of them.
PATIENCE = 30           # measurements without improvement before the walk counts as converged
STOP_AFTER = 20         # the agent's stop action counts only after this many without improvement
AUTOTUNE_NEAR = 1 / 3   # a busy all-AUTOTUNE reading at least this share of the best: no end hybrid
FINETUNE = dict(lr=1e-4, batch_size=16, buffer_size=4096, eps_start=0.0, eps_end=0.0, gamma=0.0)
"""DQN settings for online fine-tuning: gentle, small batches, no exploration, one-step
targets (the measured reward of a move: the scale pretraining taught, :mod:`~intune_flow.agent.teacher`)."""
VARIANTS = {
    "shipped": "intune as shipped: smart start, AUTOTUNE floor, then the policy's moves",
    "uniform": "the same search with the policy's choices replaced by a uniform choice among "
               "the legal single-knob moves, AUTOTUNE moves included (heuristics kept; no "
               "stop action, no learning)",
    "bare": "the policy alone: no smart start, AUTOTUNE floor or hybrid "
            "config (the memory guard and the end-of-search re-measure kept)",
}
"""Ablation variants of the search (``run_search(..., variant=)``, ``benchmarks.ablation``):
what the RL policy contributes is (shipped) against (uniform), and (bare) shows what the
heuristics around it contribute."""


def load_policy(policy_state=None) -> dict:
    """The policy to start from (the shipped one when None), with torch imported: done before
    the search's clock starts, since importing torch takes seconds that measure nothing."""
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401  (torch.optim.Adam() imports it: seconds, measuring nothing)

    if policy_state is None:
        from ..agent.policy_io import load_default_policy
        policy_state = load_default_policy()
    return policy_state


def intune(tr: Tracker, env, rng, *, policy_state=None, seed=None, continuous=False,
           learn=True, variant: str = "shipped") -> dict:
    """Run the agent's walk within the tracker's budget; returns the (fine-tuned) policy weights.

    ``variant`` (one of :data:`VARIANTS`) switches parts of the search off for ablations.

    Notes ``final_cores``; ``rebased_at`` after the machine changed; ``best_mean`` and
    ``best_looks`` when the end-of-search re-measure chose the best
    (:func:`~intune_flow.search.race.confirm`).
    """
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)    # a 20k-parameter net: one thread is fastest; restored below
    try:
        return _intune(tr, env, rng, policy_state=policy_state, seed=seed,
                       continuous=continuous, learn=learn and variant != "uniform",
                       variant=variant)
    finally:
        torch.set_num_threads(threads)


def _intune(tr: Tracker, env, rng, *, policy_state, seed, continuous, learn,
            variant: str = "shipped") -> dict:
    policy_state = load_policy(policy_state)
    from ..agent.dqn import DQNAgent, DQNConfig
    agent = DQNAgent(DQNConfig(**FINETUNE), state=policy_state, seed=seed)
    walk = Walk(env.space, tr.start, cpu_budget=env.cpu_budget, ram_budget=env.ram_budget,
                plateau=_plateau(tr.start), accept=_plateau(tr.start) / 2,
                autotune=has_native_autotune(env), keep=kept_from_autotune(env))
    cores = env.cpu_budget
    # The last few measurements go to a second look at the best candidates (with, where the
    # space has a thread pool, the best's pool cut to the cores) and, where the framework
    # has its own tuner, to one hybrid config: the walk may not spend them, nor the warm-up
    # when the budget holds twice as many (a shorter one goes to the search).
    hybrid = _hybrid(env) if variant != "bare" else 0
    raced = confirm_count(tr)
    pool = _pool_raced(env) if variant != "bare" and raced >= CONFIRM else 0
    reserve = None if continuous else raced + hybrid + pool
    held = reserve is not None and tr.measurements_left() >= 2 * reserve
    end = None
    try:
        try:
            _warm_up(tr, env, walk, heuristics=variant != "bare",
                     reserve=reserve if held else None, hybrid=hybrid)
        except _Reserved:
            end = "budget"
        anchor = walk.best if variant != "bare" else None
        while end is None:
            if env.cpu_budget != cores:
                cores = _reallocate(tr, env, walk, cores)
            obs, mask = _observe(tr, walk, allow_stop=walk.since_improvement >= STOP_AFTER)
            ending = _reached(tr, _end_reserve(tr, env, walk, reserve, hybrid, pool)) and \
                _end_has_work(tr, env, walk)
            action, end = _act(agent, walk, obs, mask, ending=ending, variant=variant, rng=rng)
            if end is not None:
                if not continuous:
                    break
                _watch(tr, walk)
                end = None
                continue
            reward, _, m = walk.step(action, tr.measure)
            if learn and m is not None:
                agent.remember(obs, action, reward, *_observe(tr, walk), False)
                agent.learn(1)
        tr.stop(end)
        if hybrid:
            _measure_hybrid(tr, env, walk)
        confirm(tr, raced, tie=walk.plateau, anchor=anchor,
                 pool_look=bool(pool))
    except BudgetSpent:
        pass
    tr.note("final_cores", cores)
    return agent.state() if learn else policy_state


class _Reserved(Exception):
    """The warm-up reached the measurements kept for the end of the search."""


def _reached(tr: Tracker, reserve: float | None) -> bool:
    """Whether one more measurement would leave fewer than ``reserve`` for the end; never
    before the first step, which the budget promises (:class:`Tracker`)."""
    return reserve is not None and tr.steps > 0 and tr.measurements_left() < reserve + 1


def _end_reserve(tr: Tracker, env, walk: Walk, reserve: float | None,
                 hybrid: int, pool: int = 0) -> float | None:
    """The measurements the end of the search still needs: ``reserve``, less the ``hybrid``
    one where the end has no hybrid to measure (the smart start measured the best's,
    :func:`~intune_flow.agent.moves.unpin`, or the CPU is busy: :func:`_end_hybrid`), so
    the walk takes that measurement instead of the race's extra rounds. The generality
    suite's ``own_pool`` at 20 s (full run of 2639660) spent its one walk step on the GETs
    back at 128 calls, then three looks on a race of two configs 41% apart; its 60 s
    search found the cross at 8 calls, 12% ahead, on the walk step after that one.
    Likewise less the ``pool`` one where the best has no pool to cut to the cores (an idle
    CPU, or the pool already there) or the cut is already measured
    (:func:`~intune_flow.agent.moves.pool_to_cores`): it races on its own looks."""
    if reserve is None:
        return reserve
    if hybrid and _end_hybrid(tr, env, walk) is None:
        reserve -= hybrid
    if pool:
        cut = pool_at_cores(env.space, walk.best, env.cpu_budget)
        if cut is None or config_key(cut) in raceable(tr):
            reserve -= pool
    return reserve


def _end_has_work(tr: Tracker, env, walk: Walk) -> bool:
    """Whether the end of the search has a use for the measurements kept for it: two
    configs to race (:func:`~intune_flow.search.race.contenders`), or a hybrid to measure.
    A walk from an all-AUTOTUNE config (a cached one, refined) has neither until it moves,
    so it walks on instead of idling to its end."""
    return len(contenders(tr)) >= 2 or _end_hybrid(tr, env, walk) is not None


def _warm_up(tr: Tracker, env, walk: Walk, heuristics: bool = True,
             reserve: float | None = None, hybrid: int = 0) -> None:
    """Before the policy's moves: the memory guard, the AUTOTUNE floor, the smart start
    (the memory guard only without ``heuristics``). The smart start's jumps stop at the
    ``reserve`` measurements kept for the end (raising :class:`_Reserved`), less the
    ``hybrid``'s where the end has none to measure (:func:`_end_reserve`). Its scaling
    holds the pools near the cores unless AUTOTUNE, measured here, left the CPU idle
    (:func:`~intune_flow.agent.moves.scale_out`). Where the framework has its own tuner, a
    stage the smart start left saturated at its maximum gets the hybrid config then, not
    only at the end (:func:`~intune_flow.agent.moves.unpin`)."""
    if not walk.current.ok:
        recover(walk, tr.measure, max_steps=10**9)
    if not heuristics:
        return
    _measure_native_autotune(tr, env)

    def measure(config):
        if _reached(tr, _end_reserve(tr, env, walk, reserve, hybrid)):
            raise _Reserved()
        return tr.measure(config)

    smart_start(walk, measure, trim=_autotune_busy(tr, env, walk) is not False,
                deepen=has_native_autotune(env))
    if has_native_autotune(env):
        unpin(walk, measure, keep=kept_from_autotune(env))


def _observe(tr: Tracker, walk: Walk, allow_stop: bool = True):
    walk.set_budget_left(tr.fraction_left())
    return walk.observe(allow_stop=allow_stop)


def _act(agent, walk: Walk, obs, mask, *, ending: bool, variant: str = "shipped",
         rng=None) -> tuple[int | None, str | None]:
    """(action, None), or (None, why the walk ends): "converged" when no move is open, after
    ``PATIENCE`` measurements without gain or when the policy stops; "budget" when ``ending``.
    The policy chooses every single-knob move (the stage signals are in its observation:
    it raises a saturated stage where that pays); "uniform" picks uniformly among the open
    single-knob moves instead."""
    if not mask[:-1].any() or walk.since_improvement >= PATIENCE:
        return None, "converged"
    if ending:
        return None, "budget"
    if variant == "uniform":
        action = int(rng.choice(np.flatnonzero(mask[:-1])))
    else:
        action = agent.act(obs, mask)
    if action == len(mask) - 1:
        return None, "converged"
    return action, None


def _watch(tr: Tracker, walk: Walk) -> None:
    """Continuous mode once the walk ends: re-measure the best config (so a change of the
    machine is noticed) and walk on from it, its moves open again."""
    m = tr.measure(walk.best.config)
    walk.restart(m if m.ok else walk.best)


def _measure_native_autotune(tr: Tracker, env) -> None:
    """Measure the framework's own tuner once, so the result is never a config it beats.

    A short window can understate AUTOTUNE (it ramps up while running), so this is a
    floor, not a comparison; the walk does not start from it (its knobs have no value).
    A ``known`` measurement of it is read instead (:meth:`Tracker.reuse`).
    """
    if has_native_autotune(env) and tr.reuse(env.space.autotune()) is None:
        tr.measure(env.space.autotune())


def _hybrid(env) -> int:
    """1 where the search measures a hybrid config at its end (tf.data), else 0. The hybrid
    with what held AUTOTUNE back grown (:func:`_measure_hybrid`) is not kept for: it fires on
    few pipelines, so it takes one of the re-measures' measurements when it does, not a walk
    step from all."""
    return 1 if has_native_autotune(env) else 0


def _pool_raced(env) -> int:
    """1 where the end race may add the best config with its thread pool cut to the cores
    (:func:`~intune_flow.agent.allocations.pool_at_cores`): the space has a thread-pool knob.
    Kept for only where the budget races ``CONFIRM`` candidates: a shorter one needs the
    measurement for its walk (simulator, 10 measurements: 0.960 of the oracle with it kept
    for, 0.979 without)."""
    return 1 if any(k.kind == "threads" for k in env.space) else 0


def _measure_hybrid(tr: Tracker, env, walk: Walk) -> None:
    """Where the framework has its own tuner, measure the walk's best with its parallelism
    handed to it (:func:`~intune_flow.agent.allocations.hybrid_autotune`) once: AUTOTUNE's run-time
    re-balancing with the pool and buffers the walk found can beat both. When it left the
    CPU idle and its pool or the knobs it kept held AUTOTUNE back
    (:func:`~intune_flow.agent.allocations.autotune_held_back`), the hybrid with those grown is
    measured too. Like every measurement they can become the best, and the end-of-search
    re-measure looks at them again.

    None is measured where the best and all-AUTOTUNE both kept the CPU busy
    (:func:`_end_hybrid`).

    Where the smart start measured the best's hybrid already
    (:func:`~intune_flow.agent.moves.unpin`) but the end's reserve stopped it before the
    growth, the growth is measured here from that hybrid's best look: on 2 cores a TFRecord
    read kept at 1 file held its hybrid to 40,000-93,000 records/s, and 20 s searches that
    stopped there read 0.26-0.31 of the best known, one that grew it to 2 files 0.80."""
    cfg = _end_hybrid(tr, env, walk)
    try:
        m = tr.measure(cfg) if cfg is not None else _hybrid_seen(tr, env, walk)
        grown = autotune_held_back(env.space, m, keep=kept_from_autotune(env)) \
            if m is not None else None
        if grown is not None and not _measured(tr, grown):
            tr.measure(grown)
    except BudgetSpent:
        pass


def _measured(tr: Tracker, config: dict) -> list:
    """``config``'s measurements on this machine (since the last rebase)."""
    key = config_key(config)
    return [m for m in tr.history[tr.rebased_at:] if config_key(m.config) == key]


def _hybrid_seen(tr: Tracker, env, walk: Walk):
    """The best look of the walk's best as a hybrid (itself, when it is one: a stage at
    AUTOTUNE, none it could hand over left static, the pools not), where that was measured
    on this machine and ran; None otherwise."""
    keep = kept_from_autotune(env)
    config = hybrid_autotune(env.space, walk.best.config, keep=keep) or walk.best.config
    if hybrid_autotune(env.space, config, keep=keep) is not None or \
            config == env.space.autotune() or \
            not any(config[k.name] == AUTOTUNE for k in env.space if k.kind == "parallelism"):
        return None
    looks = [m for m in _measured(tr, config) if m.ok]
    return max(looks, key=lambda m: m.throughput) if looks else None


def _end_hybrid(tr: Tracker, env, walk: Walk) -> dict | None:
    """The hybrid config the end of the search measures (:func:`_measure_hybrid`): the
    walk's best with its parallelism at AUTOTUNE. None where the framework has no tuner of
    its own, the best did not run, there is no such hybrid, it was measured already on this
    machine (:func:`~intune_flow.agent.moves.unpin`: the race sees that one), or the best
    and all-AUTOTUNE both kept the CPU busy.

    On a busy CPU AUTOTUNE on its own pool (one thread per core) needing every core says
    the stages it balances want cores, and their hybrid gets AUTOTUNE's split of them
    again, whatever pool and buffers the walk found: in the full generality run of 2639660
    each such end hybrid (on the pool cut to 1.5 threads per core, as it then was) read
    0.56-0.85 of its search's best, on all seven CPU-bound tf.data pipelines of the suite
    at 20 s and 60 s, while the walk's single-knob AUTOTUNE moves reached the partial
    hybrids that won there (``interleave``'s prefetch, ``mixed_sources``' first parse). Its
    measurement goes to the walk instead (:func:`_end_reserve`). All-AUTOTUNE counts as
    busy there only when it also read near the best (:func:`_autotune_near`). Where a
    stage waits and leaves the CPU idle, the hybrid can win: AUTOTUNE grows such a stage
    past its declared maximum (the suite's ``own_pool``, ``tfrecord_lookup`` and
    ``latency_cpu``)."""
    if not _hybrid(env) or not walk.best.ok:
        return None
    if _autotune_near(tr, env, walk) and walk.best.own_share >= BUSY_CPU:
        return None
    cfg = hybrid_autotune(env.space, walk.best.config, keep=kept_from_autotune(env))
    if cfg is None or _measured(tr, cfg):
        return None
    return cfg


def _autotune_near(tr: Tracker, env, walk: Walk) -> bool:
    """Whether all-AUTOTUNE kept the CPU busy (:func:`_autotune_busy`) and its best look read
    at least ``AUTOTUNE_NEAR`` of the walk's best: its split of the cores is then near what
    the stages want (on the suite's CPU-bound pipelines it read 0.46-0.91 of the best, full
    run of 2639660). One far below the best on a busy CPU was held by something else: on
    2 cores that others kept 95% busy (``benchmarks.cpu_load``), a pipeline of 100 ms GETs
    read all-AUTOTUNE's 0.15 of the CPU as 0.75 of what they left it, at 0.21 of the best;
    its hybrid read 0.30 of the best on the pool cut to 3 threads, and the search's best
    window on the best's 64 threads (scratch runs of the test pipeline's search, 20:58 UTC
    2026-12-06)."""
    if not _autotune_busy(tr, env, walk) or not walk.best.ok:
        return False
    looks = _autotune_looks(tr, env)
    return max(m.throughput for m in looks) >= AUTOTUNE_NEAR * walk.best.throughput


def _autotune_looks(tr: Tracker, env) -> list:
    """All-AUTOTUNE's measurements in this search that ran."""
    auto = config_key(env.space.autotune())
    return [m for m in tr.history if m.ok and config_key(m.config) == auto]


def _autotune_busy(tr: Tracker, env, walk: Walk) -> bool | None:
    """Whether all-AUTOTUNE kept the CPU busy in this search (its best look), None where not
    measured: at ``BUSY_CPU`` or more, the stages it balances on one thread per core want
    cores. One window's CPU share is as noisy as its throughput, so a look within the walk's
    noise level (``plateau``) of ``BUSY_CPU`` counts as busy: a cached, shuffled CPU-bound
    read (the generality suite's ``shuffle_cache``) put AUTOTUNE at 0.86 in one search and
    just under 0.8 in another, which then kept a pool of 8 threads on 2 cores: 35,200
    records/s against 45,000 on 3 (``python -m benchmarks.generality --cases shuffle_cache
    --compare ...``, 2026-12-05 22:17 UTC).

    Its share is of the CPU other processes left it
    (:attr:`~intune_flow.measurement.Measurement.own_share`): the suite's ``interleave``,
    measured while others held a quarter of the CPU, put AUTOTUNE at 0.64 of the CPU with
    0.89 busy; read as idle, that kept the scaling's 32-thread pool, 0.65 of the best known
    at 20 s (full run of 0d2e094, 14:00 UTC 2026-12-06)."""
    looks = _autotune_looks(tr, env)
    if not looks:
        return None
    return max(m.own_share for m in looks) >= BUSY_CPU * (1 - walk.plateau)


def _reallocate(tr: Tracker, env, walk: Walk, old_cores: float) -> float:
    """The machine changed: re-measure the best config, try it rescaled, restart the walk there."""
    new = env.cpu_budget
    tr.emit("rebase", None, cores=new, previous_cores=old_cores)
    kept = tr.measure(walk.best.config)
    cand = rescaled(env.space, walk.best.config, new / old_cores)
    base = kept
    if cand != walk.best.config:
        scaled = tr.measure(cand)
        if scaled.ok and (not kept.ok or scaled.throughput > kept.throughput):
            base = scaled
    # Results from the old machine no longer describe this one.
    walk.restart(base, cpu_budget=new, forget=True)
    tr.rebase(base)
    return new


def _plateau(start) -> float:
    """Moves within this share of the current throughput count as flat: the noise level."""
    return float(min(0.08, max(0.02, start.spread / 2))) if start.ok else 0.02

