"""Oracle-taught pretraining targets: in the simulator every move's true gain is known.

A real search sees one noisy window per move it makes; the simulator can also say,
noise-free and in microseconds, what *every* legal move from a state would have
given. Pretraining regresses the Q-network onto that whole row of expected rewards
(:func:`move_targets`): each state teaches all of its moves at once, where a DQN
transition teaches one, through a noisy and bootstrapped target. The target is the
walk's own reward (:meth:`~intune_flow.agent.walk.Walk.step`) with the noise taken
out, so the Q-values keep the scale online fine-tuning (``gamma = 0``) learns on.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .walk import ERROR_PENALTY, OOM_PENALTY, STEP_COST, Walk  # noqa: F401


def move_targets(walk: Walk, env) -> np.ndarray:
    """Expected reward of each action [2K + 1] from the walk's current config on ``env``
    (a :class:`~intune_flow.sim.SimEnv`): log gain of the move's candidate, clipped as
    the walk clips it, minus the step cost; an OOM the penalty; a move with no candidate
    only the step cost; stop 0."""
    space = walk.space
    here = env.true_throughput(walk.current.config)
    out = np.zeros(2 * len(space) + 1, np.float32)
    for i, k in enumerate(space):
        for d, direction in enumerate((1, -1)):
            cand = walk.candidate(k.name, direction)
            if cand is None:
                out[2 * i + d] = -STEP_COST
                continue
            x = env.true_throughput(cand)
            if x <= 0:
                out[2 * i + d] = -STEP_COST - OOM_PENALTY
            elif here <= 0:
                out[2 * i + d] = 1.0 - STEP_COST
            else:
                out[2 * i + d] = max(-1.0, min(1.0, math.log(x / here))) - STEP_COST
    return out


class TargetBuffer:
    """A ring of (observation, legal mask, target row), padded to ``k_pad`` knobs."""

    def __init__(self, capacity: int, k_pad: int, rng: np.random.Generator):
        from .observation import GLOBAL_FEATURES, KNOB_FEATURES
        self.capacity, self.k_pad, self.rng = capacity, k_pad, rng
        self.size = self.pos = 0
        self.kf = np.zeros((capacity, k_pad, KNOB_FEATURES), np.float32)
        self.g = np.zeros((capacity, GLOBAL_FEATURES), np.float32)
        self.n = np.zeros(capacity, np.int64)
        self.mask = np.zeros((capacity, 2 * k_pad + 1), bool)
        self.y = np.zeros((capacity, 2 * k_pad + 1), np.float32)

    def add(self, obs, mask: np.ndarray, targets: np.ndarray) -> None:
        kf, g = obs
        k = kf.shape[0]
        if k > self.k_pad:
            return
        i = self.pos
        self.kf[i] = 0
        self.kf[i, :k] = kf
        self.g[i], self.n[i] = g, k
        self.mask[i] = False
        self.mask[i, :2 * k] = mask[:-1]
        self.mask[i, -1] = True     # stopping is always taught (its reward: 0)
        self.y[i] = 0
        self.y[i, :2 * k] = targets[:-1]
        self.pos = (i + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample(self, n: int):
        idx = self.rng.integers(0, self.size, size=n)
        present = np.arange(self.k_pad)[None, :] < self.n[idx][:, None]
        t = torch.from_numpy
        return t(self.kf[idx]), t(self.g[idx]), t(present), t(self.mask[idx]), t(self.y[idx])


def fit(agent, buffer: TargetBuffer, batch_size: int) -> float | None:
    """One regression step of ``agent.q`` onto the buffer's target rows (legal moves only);
    the target network follows (it is what online fine-tuning starts from)."""
    from .dqn import optimize
    if buffer.size < batch_size:
        return None
    kf, g, present, mask, y = buffer.sample(batch_size)
    q = agent.q(kf, g, present)
    loss = torch.nn.functional.smooth_l1_loss(q[mask], y[mask])
    optimize(agent.q, agent.target, agent.opt, loss, agent.cfg.grad_clip, agent.cfg.tau)
    agent.updates += 1
    return float(loss.detach())
