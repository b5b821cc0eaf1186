"""The InTune method: the pretrained DQN walks the knobs, learning online from what it measures."""

from __future__ import annotations

from ..agent.walk import Walk
from ..knobs import THREAD_KINDS
from .tracker import BudgetSpent, Tracker

# When to stop: in the simulator, gains still come 10-20 measurements after the last one
# (benchmarks/README.md, "When the agent stops"); waiting for 20 keeps most of them.
PATIENCE = 30           # measurements without improvement before the walk counts as converged
CONFIRM = 3             # best candidates re-measured once at the end (noisy winners)
STOP_AFTER = 20         # the agent's stop action counts only after this many without improvement
FINETUNE = dict(lr=1e-4, batch_size=16, buffer_size=4096, eps_start=0.0, eps_end=0.0)
"""DQN settings for online fine-tuning: gentle, small batches, no exploration."""


def _rescaled(env, config: dict, ratio: float) -> dict:
    """Parallelism and pool scaled by the change in cores, snapped to each knob's grid."""
    out = dict(config)
    for k in env.space:
        if k.kind in THREAD_KINDS:
            want = config[k.name] * ratio
            out[k.name] = min(k.grid(), key=lambda g: abs(g - want))
    return out


def load_policy(policy_state=None) -> dict:
    """The policy to start from (the shipped one when None), with torch imported: done before
    the search's clock starts, since importing torch takes seconds that measure nothing."""
    import torch  # noqa: F401

    if policy_state is None:
        from ..agent.policy_io import load_default_policy
        policy_state = load_default_policy()
    return policy_state


def intune(tr: Tracker, env, rng, *, policy_state=None, seed=None, continuous=False,
           learn=True) -> dict:
    """Run the agent's walk within the tracker's budget; returns the (fine-tuned) policy weights."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)    # a 20k-parameter net: one thread is fastest; restored below
    try:
        return _intune(tr, env, policy_state=policy_state, seed=seed, continuous=continuous,
                       learn=learn)
    finally:
        torch.set_num_threads(threads)


def _intune(tr: Tracker, env, *, policy_state, seed, continuous, learn) -> dict:
    policy_state = load_policy(policy_state)
    from ..agent.dqn import DQNAgent, DQNConfig
    agent = DQNAgent(DQNConfig(**FINETUNE), state=policy_state, seed=seed)
    walk = Walk(env.space, tr.start, cpu_budget=env.cpu_budget, ram_budget=env.ram_budget,
                plateau=_plateau(tr.start), accept=_plateau(tr.start) / 2)
    cores = env.cpu_budget
    try:
        if not walk.current.ok:
            walk.recover(tr.measure, max_steps=10**9)
        walk.smart_start(tr.measure)
        _measure_native_autotune(tr, env)
        while True:
            if env.cpu_budget != cores:
                cores = _reallocate(tr, env, walk, cores)
            walk.set_budget_left(tr.fraction_left())
            obs, mask = walk.observe(allow_stop=walk.since_improvement >= STOP_AFTER)
            # Keep the last few measurements for a second look at the best candidates.
            ending = not continuous and tr.measurements_left() <= CONFIRM + 0.5
            converged = not mask[:-1].any() or walk.since_improvement >= PATIENCE
            if not converged and not ending:
                a = walk.bottleneck_action(mask)
                if a is None:
                    a = agent.act(obs, mask)
                if a == len(mask) - 1:
                    converged = True
            if converged or ending:
                if not continuous:
                    tr.stopped = "converged" if converged else "budget"
                    _confirm(tr, walk)
                    break
                # Keep watching: re-measure the best config so a machine change is noticed.
                m = tr.measure(walk.best.config)
                walk.best = walk.current = m if m.ok else walk.best
                walk.tried.clear()
                walk.since_improvement = 0
                continue
            reward, _, m = walk.step(a, tr.measure)
            if learn and m is not None:
                walk.set_budget_left(tr.fraction_left())
                obs2, mask2 = walk.observe()
                agent.remember(obs, a, reward, obs2, mask2, False)
                agent.learn(1)
    except BudgetSpent:
        pass
    tr.final_cores = cores
    return agent.state() if learn else policy_state


def _measure_native_autotune(tr: Tracker, env) -> None:
    """Measure the framework's own tuner once, so the result is never a config it beats.

    A short window can understate AUTOTUNE (it ramps up while running), so this is a
    floor, not a comparison; the walk does not start from it (its knobs have no value).
    """
    if getattr(env, "native_autotune", False):
        tr.measure(env.space.autotune())


def _reallocate(tr: Tracker, env, walk: Walk, old_cores: float) -> float:
    """The machine changed: re-measure the best config, try it rescaled, restart the walk there."""
    new = env.cpu_budget
    tr.emit("rebase", None, cores=new, previous_cores=old_cores)
    kept = tr.measure(walk.best.config)
    cand = _rescaled(env, walk.best.config, new / old_cores)
    base = kept
    if cand != walk.best.config:
        scaled = tr.measure(cand)
        if scaled.ok and (not kept.ok or scaled.throughput > kept.throughput):
            base = scaled
    walk.rebase(base, new)
    # Results from the old machine no longer describe this one.
    tr.best = base if base.ok else tr.best
    tr.rebased_at = len(tr.history)
    return new


def _plateau(start) -> float:
    """Moves within this share of the current throughput count as flat: the noise level."""
    return float(min(0.08, max(0.02, start.spread / 2))) if start.ok else 0.02


def _confirm(tr: Tracker, walk: Walk) -> None:
    """Re-measure the best few configs once and keep the one with the best mean.

    A single noisy window can crown a config that is not the best; with budget
    left after convergence, a second look at the top candidates fixes most of it.
    """
    from ..measurement import Measurement
    from ..agent.walk import config_key
    since = getattr(tr, "rebased_at", 0)
    seen: dict[tuple, list] = {}
    for m in tr.history[since:]:
        if m.ok:
            seen.setdefault(config_key(m.config), []).append(m)
    top = sorted(seen.values(), key=lambda ms: -max(x.throughput for x in ms))[:CONFIRM]
    if len(top) < 2:
        return
    try:
        for ms in top:
            again = tr.measure(ms[0].config)
            if again.ok:
                ms.append(again)
    except BudgetSpent:
        pass
    means = [(sum(x.throughput for x in ms) / len(ms), ms) for ms in top]
    mean, ms = max(means, key=lambda t: t[0])
    start_key = config_key(tr.start.config) if tr.start is not None else None
    if config_key(ms[0].config) == start_key:
        tr.best = tr.start
        return
    if tr.start is not None and tr.start.ok and mean < tr.start.throughput:
        return
    last = ms[-1]
    tr.best = Measurement(**{**last.to_dict(), "throughput": mean,
                             "records_per_s": mean if last.records_per_s else 0.0,
                             "elements_per_s": mean if last.elements_per_s else 0.0})

