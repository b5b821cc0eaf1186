"""Pretraining in the simulator: many random pipelines on machines of 2-128 cores, taught by
the oracle (:mod:`.teacher`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from ..sim import SimEnv, oracle, sample_pipeline
from .dqn import DQNAgent, DQNConfig, linear_schedule
from .moves import recover, smart_start
from .teacher import TargetBuffer, fit, move_targets
from .walk import Walk

CORE_CHOICES = (2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)
EPISODE_STEPS = 40
EVAL_PIPELINES = 24
TEACHER = DQNConfig(gamma=0.0, eps_start=0.5, eps_end=0.1)
"""Pretraining's settings: one-step targets (``gamma`` 0, as online fine-tuning), and
exploration that leaves most states to the policy's own walks."""


@dataclass
class PretrainLog:
    steps: list[int] = field(default_factory=list)
    eval_ratio: list[float] = field(default_factory=list)     # median best/oracle on held-out sims
    eval_p10: list[float] = field(default_factory=list)
    episode_gain: list[float] = field(default_factory=list)   # mean log(best/start) of recent episodes
    loss: list[float] = field(default_factory=list)


def random_start(env: SimEnv, rng: np.random.Generator) -> dict:
    """Mostly the user's defaults (AUTOTUNE -> cores), sometimes all-ones or a random grid point."""
    u = rng.random()
    if u < 0.6:
        return env.space.concretize(env.space.defaults(), env.cpu_budget)
    if u < 0.75:
        return env.space.ones()
    return {k.name: int(rng.choice(k.grid())) for k in env.space}


def run_episode(agent: DQNAgent, env: SimEnv, start: dict, *, epsilon: float = 0.0,
                heuristics: bool = True, max_steps: int = EPISODE_STEPS,
                buffer: TargetBuffer | None = None, on_state=None) -> Walk:
    """One walk of at most ``max_steps`` measurements, moved as online search moves it: the
    memory guard, then (with ``heuristics``) the smart start, then the policy's choices
    (epsilon-greedy). Every state where the policy chooses goes into ``buffer`` with its
    oracle targets (:func:`~.teacher.move_targets`)."""
    walk = Walk(env.space, env.measure(start), cpu_budget=env.cpu_budget,
                ram_budget=env.ram_budget, max_steps=max_steps, autotune=env.native_autotune)
    if not walk.current.ok:
        recover(walk, env.measure, max_steps)
    if heuristics:
        smart_start(walk, env.measure)
    decisions = 0
    while walk.steps < max_steps and decisions < 3 * max_steps:
        walk.set_budget_left(1 - walk.steps / max_steps)
        obs, mask = walk.observe(allow_stop=False)
        if not mask[:-1].any():
            break
        decisions += 1
        if buffer is not None:
            buffer.add(obs, mask, move_targets(walk, env))
            if on_state is not None:
                on_state()
        action = agent.act(obs, mask, explore=epsilon > 0, epsilon=epsilon)
        walk.step(action, env.measure)
    return walk


def eval_set(n: int = EVAL_PIPELINES):
    """Held-out sims (the 'test' split, never used for training updates) with their oracles."""
    out = []
    for i in range(n):
        cores = CORE_CHOICES[i % len(CORE_CHOICES)]
        env = SimEnv(sample_pipeline("test", i, cores=cores), seed=i,
                     native_autotune=i % 2 == 0)
        out.append((env, oracle(env)[1]))
    return out


def evaluate_policy(agent: DQNAgent, sims, max_steps: int = EPISODE_STEPS) -> tuple[float, float]:
    """Median and p10 of best/oracle over ``sims``: the policy's greedy walks, no learning."""
    ratios = []
    for env0, best in sims:
        env = SimEnv(env0.pipeline, seed=1, native_autotune=env0.native_autotune)
        walk = run_episode(agent, env, env.space.concretize(env.space.defaults(), env.cpu_budget),
                           max_steps=max_steps)
        ratios.append(env.true_throughput(walk.best.config) / best if best > 0 else 1.0)
    return float(np.median(ratios)), float(np.percentile(ratios, 10))


def pretrain(steps: int, seed: int = 0, *, config: DQNConfig | None = None, eval_every: int = 5000,
             log=print, threads: int = 1) -> tuple[DQNAgent, PretrainLog]:
    """Train a fresh agent on ``steps`` oracle-taught states; returns it and its training curve.

    Walks over random training pipelines (2-128 cores, a quarter without per-stage
    signals, a quarter without the heuristics, as ablations and bare searches meet them,
    half with tf.data's AUTOTUNE as a move, half without, as torch pipelines)
    collect the states where the policy chooses; each is stored with every move's
    noise-free expected reward and the network regresses onto them (:mod:`.teacher`).
    Exploration decays from ``eps_start`` to ``eps_end`` so the states come more and more
    from the policy's own walks (the states it will meet).
    """
    torch.set_num_threads(threads)
    rng = np.random.default_rng(seed)
    agent = DQNAgent(config or TEACHER, seed=seed)
    cfg = agent.cfg
    buffer = TargetBuffer(cfg.buffer_size, cfg.k_pad, rng)
    hist = PretrainLog()
    sims = eval_set()
    t = 0
    episode = 0
    gains: list[float] = []
    losses: list[float] = []
    next_eval = 0
    t0 = time.time()

    def tick():
        nonlocal t
        t += 1
        loss = fit(agent, buffer, cfg.batch_size)
        if loss is not None:
            losses.append(loss)

    def record_eval() -> tuple[float, float]:
        """Score the policy on the held-out pipelines and append a point to the curve."""
        med, p10 = evaluate_policy(agent, sims)
        hist.steps.append(t)
        hist.eval_ratio.append(med)
        hist.eval_p10.append(p10)
        hist.episode_gain.append(float(np.mean(gains[-200:])) if gains else 0.0)
        hist.loss.append(float(np.mean(losses[-500:])) if losses else float("nan"))
        return med, p10

    while t < steps:
        if t >= next_eval:
            med, p10 = record_eval()
            log(f"step {t:>7d}  episodes {episode:>5d}  eps {eps_now(cfg, t, steps):.2f}  "
                f"held-out best/oracle median {med:.3f} p10 {p10:.3f}  "
                f"mean log-gain {hist.episode_gain[-1]:.3f}  loss {hist.loss[-1]:.4f}  "
                f"{time.time() - t0:.0f}s")
            next_eval += eval_every
        idx = seed * 10_000_000 + episode
        cores = int(rng.choice(CORE_CHOICES))
        env = SimEnv(sample_pipeline("train", idx, cores=cores), seed=idx,
                     signals=bool(rng.random() > 0.25), native_autotune=bool(rng.random() < 0.5))
        walk = run_episode(agent, env, random_start(env, rng), epsilon=eps_now(cfg, t, steps),
                           heuristics=bool(rng.random() > 0.25), buffer=buffer, on_state=tick)
        if walk.start.ok and walk.start.throughput > 0:
            gains.append(float(np.log(max(walk.best.throughput, 1e-9) / walk.start.throughput)))
        episode += 1
    med, p10 = record_eval()
    log(f"step {t:>7d}  episodes {episode:>5d}  final held-out best/oracle median {med:.3f} "
        f"p10 {p10:.3f}  {time.time() - t0:.0f}s")
    return agent, hist


def eps_now(cfg: DQNConfig, t: int, total: int) -> float:
    return linear_schedule(cfg.eps_start, cfg.eps_end, cfg.eps_fraction * total, t)
