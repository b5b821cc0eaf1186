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

import numpy as np
import torch

from .dqn import PaddedRing, optimize
from .observation import MOVES, action_index
from .walk import OOM_PENALTY, STEP_COST, Walk, log_gain


def move_targets(walk: Walk, env) -> np.ndarray:
    """Expected reward of each action [len(MOVES) * K + 1] from the walk's current config on
    ``env`` (a :class:`~intune_flow.sim.SimEnv`): log gain of the move's candidate, clipped
    as the walk clips it, minus the step cost; an OOM the penalty; a move with no candidate
    only the step cost; stop 0. (An AUTOTUNE move's candidate runs as AUTOTUNE would set it,
    :meth:`~intune_flow.sim.SimEnv.true_throughput`.)"""
    space = walk.space
    here = env.true_throughput(walk.current.config)
    out = np.zeros(len(MOVES) * len(space) + 1, np.float32)
    for i, k in enumerate(space):
        for direction in MOVES:
            a = action_index(i, direction)
            cand = walk.candidate(k.name, direction)
            if cand is None:
                out[a] = -STEP_COST
                continue
            x = env.true_throughput(cand)   # 0: past the RAM budget
            out[a] = (log_gain(x, here) if x > 0 else -OOM_PENALTY) - STEP_COST
    return out


class TargetBuffer(PaddedRing):
    """A ring of (observation, legal mask, target row), padded to ``k_pad`` knobs."""

    def __init__(self, capacity: int, k_pad: int, rng: np.random.Generator):
        super().__init__(capacity, k_pad, rng)
        width = len(MOVES) * k_pad + 1
        self.mask = np.zeros((capacity, width), bool)
        self.y = np.zeros((capacity, width), np.float32)

    def add(self, obs, mask: np.ndarray, targets: np.ndarray) -> None:
        i = self._put(obs)
        if i is None:
            return
        k = int(self.n[i])
        self.mask[i] = False
        self.mask[i, :len(MOVES) * k] = mask[:-1]
        self.mask[i, -1] = True     # stopping is always taught (its reward: 0)
        self.y[i] = 0
        self.y[i, :len(MOVES) * k] = targets[:-1]
        self._advance()

    def sample(self, n: int):
        idx, present = self._draw(n)
        t = torch.from_numpy
        return t(self.kf[idx]), t(self.g[idx]), t(present), t(self.mask[idx]), t(self.y[idx])


def fit(agent, buffer: TargetBuffer, batch_size: int) -> float | None:
    """One regression step of ``agent.q`` onto the buffer's target rows (legal moves only);
    the target network follows (it is what online fine-tuning starts from)."""
    if buffer.size < batch_size:
        return None
    kf, g, present, mask, y = buffer.sample(batch_size)
    q = agent.q(kf, g, present)
    loss = torch.nn.functional.smooth_l1_loss(q[mask], y[mask])
    optimize(agent.q, agent.target, agent.opt, loss, agent.cfg.grad_clip, agent.cfg.tau)
    agent.updates += 1
    return float(loss.detach())
