"""DQN (CleanRL-style, one screen): replay buffer, target network, Huber loss, clipped gradients.

Observations have a variable number of knobs; the buffer pads them to ``k_pad``
and keeps a presence mask, and actions are stored as (knob, direction) or stop
so they map onto any padding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from .network import NEG, QNet
from .observation import GLOBAL_FEATURES, KNOB_FEATURES, MOVES

STOP = -1

TIE = 1e-5
"""Q-values this close count as equal: the network treats knobs with equal features alike,
so their Q-values tie up to float rounding, and rounding differs between CPUs (a search
that chose by the last bit took a different move on another machine)."""


def greedy(q: np.ndarray, mask: np.ndarray) -> int:
    """The action of highest Q among those ``mask`` allows; of equal ones (:data:`TIE`),
    the first."""
    q = np.where(mask, q, -np.inf)
    return int(np.flatnonzero(q >= q.max() - TIE)[0])


@dataclass
class DQNConfig:
    """Hyperparameters of the agent."""

    hidden: int = 64
    """width of the per-knob and stop MLPs"""
    lr: float = 1e-3
    """Adam learning rate"""
    gamma: float = 0.9
    """discount: episodes are short (tens of measurements)"""
    batch_size: int = 128
    """transitions per gradient step"""
    buffer_size: int = 100_000
    """replay capacity"""
    tau: float = 0.01
    """Polyak rate of the target network (1.0: hard copy)"""
    grad_clip: float = 10.0
    """max gradient norm"""
    eps_start: float = 1.0
    """initial exploration rate"""
    eps_end: float = 0.05
    """final exploration rate"""
    eps_fraction: float = 0.5
    """share of training over which epsilon decays linearly"""
    k_pad: int = 16
    """knob slots in the replay buffer (observations with more knobs grow it)"""


def linear_schedule(start: float, end: float, duration: float, t: float) -> float:
    slope = (end - start) / max(duration, 1.0)
    return max(slope * t + start, end)


def optimize(q: torch.nn.Module, target: torch.nn.Module, opt, loss: torch.Tensor,
             grad_clip: float, tau: float) -> None:
    """One optimizer step on ``loss`` with clipped gradients, then the Polyak update of ``target``
    (shared by the node agent and the cluster agent, :mod:`intune_flow.scaleout.dqn`)."""
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(q.parameters(), grad_clip)
    opt.step()
    with torch.no_grad():
        for p, tp in zip(q.parameters(), target.parameters()):
            tp.mul_(1 - tau).add_(p, alpha=tau)


class PaddedRing:
    """A fixed-size ring of observations padded to ``k_pad`` knobs, with a presence count per
    slot: the part every buffer of the agent shares (:class:`ReplayBuffer`, and
    :class:`~intune_flow.agent.teacher.TargetBuffer` in pretraining)."""

    def __init__(self, capacity: int, k_pad: int, rng: np.random.Generator):
        self.capacity, self.k_pad, self.rng = capacity, k_pad, rng
        self.size = self.pos = 0
        self.kf = np.zeros((capacity, k_pad, KNOB_FEATURES), np.float32)
        self.g = np.zeros((capacity, GLOBAL_FEATURES), np.float32)
        self.n = np.zeros(capacity, np.int64)

    def _put(self, obs) -> int | None:
        """Write ``obs`` into the next slot and return its index; None (nothing written) when
        it has more knobs than the ring pads to (pretraining pads to the largest sim pipeline)."""
        kf, g = obs
        k = kf.shape[0]
        if k > self.k_pad:
            return None
        i = self.pos
        self.kf[i] = 0
        self.kf[i, :k] = kf
        self.g[i] = g
        self.n[i] = k
        return i

    def _advance(self) -> None:
        self.pos = (self.pos + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def _draw(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """``n`` slot indices drawn with replacement, and their knob presence masks [n, k_pad]."""
        idx = self.rng.integers(0, self.size, size=n)
        return idx, np.arange(self.k_pad)[None, :] < self.n[idx][:, None]


class ReplayBuffer(PaddedRing):
    """Fixed-size ring of (obs, action, reward, next_obs, next_mask, done)."""

    def __init__(self, capacity: int, k_pad: int, rng: np.random.Generator):
        super().__init__(capacity, k_pad, rng)
        c = capacity
        self.knob = np.zeros(c, np.int64)
        self.dir = np.zeros(c, np.int64)    # the move's index in MOVES; len(MOVES): stop
        self.r = np.zeros(c, np.float32)
        self.kf2 = np.zeros_like(self.kf)
        self.g2 = np.zeros_like(self.g)
        self.m2 = np.zeros((c, len(MOVES) * k_pad + 1), bool)
        self.done = np.zeros(c, np.float32)

    def add(self, obs, action: int, reward: float, next_obs, next_mask, done: bool) -> None:
        i = self._put(obs)
        if i is None:
            return
        k = int(self.n[i])
        kf2, g2 = next_obs
        n = len(MOVES)
        if action == STOP or action == n * k:
            self.knob[i], self.dir[i] = 0, n
        else:
            self.knob[i], self.dir[i] = divmod(action, n)
        self.r[i] = reward
        self.kf2[i] = 0
        self.kf2[i, :k] = kf2
        self.g2[i] = g2
        self.m2[i] = False
        self.m2[i, :n * k] = next_mask[:-1]
        self.m2[i, -1] = next_mask[-1]
        self.done[i] = float(done)
        self._advance()

    def sample(self, n: int):
        idx, present = self._draw(n)
        n = len(MOVES)
        act = np.where(self.dir[idx] == n, n * self.k_pad, n * self.knob[idx] + self.dir[idx])
        t = torch.from_numpy
        return (t(self.kf[idx]), t(self.g[idx]), t(present), t(act), t(self.r[idx]),
                t(self.kf2[idx]), t(self.g2[idx]), t(self.m2[idx]), t(self.done[idx]))


class DQNAgent:
    """Online network, target network, optimizer; ``act`` is greedy unless ``explore``."""

    def __init__(self, config: DQNConfig | None = None, state: dict | None = None,
                 seed: int | None = 0):
        self.cfg = config or DQNConfig()
        self.rng = np.random.default_rng(seed)
        if seed is not None:
            torch.manual_seed(seed)
        self.q = QNet(self.cfg.hidden)
        if state is not None:
            self.load_state(state)
        self.target = QNet(self.cfg.hidden)
        self.target.load_state_dict(self.q.state_dict())
        self.opt = torch.optim.Adam(self.q.parameters(), lr=self.cfg.lr)
        self.buffer = ReplayBuffer(self.cfg.buffer_size, self.cfg.k_pad, self.rng)
        self.updates = 0

    # -- weights -------------------------------------------------------------------
    def state(self) -> dict[str, np.ndarray]:
        return {k: v.detach().cpu().numpy().copy() for k, v in self.q.state_dict().items()}

    def load_state(self, state: dict) -> None:
        from .policy_io import validate_policy
        clean = validate_policy(state, self.cfg.hidden)
        self.q.load_state_dict({k: torch.from_numpy(v) for k, v in clean.items()})

    # -- acting --------------------------------------------------------------------
    def q_values(self, obs) -> np.ndarray:
        kf, g = obs
        with torch.no_grad():
            return self.q(torch.from_numpy(kf)[None], torch.from_numpy(g)[None])[0].numpy()

    def act(self, obs, mask: np.ndarray, explore: bool = False, epsilon: float = 0.0) -> int:
        """Index of the chosen action among the valid ones in ``mask`` (the last means stop)."""
        valid = np.flatnonzero(mask)
        if len(valid) == 0:
            return len(mask) - 1
        if explore and self.rng.random() < epsilon:
            return int(self.rng.choice(valid))
        return greedy(self.q_values(obs), mask)

    # -- learning ------------------------------------------------------------------
    def remember(self, obs, action, reward, next_obs, next_mask, done) -> None:
        self.buffer.add(obs, action, reward, next_obs, next_mask, done)

    def learn(self, steps: int = 1) -> float | None:
        """Gradient steps on replayed transitions (double-DQN targets); returns the last loss."""
        if self.buffer.size < min(self.cfg.batch_size, 32):
            return None
        loss_v = None
        for _ in range(steps):
            kf, g, present, act, r, kf2, g2, m2, done = self.buffer.sample(self.cfg.batch_size)
            present2 = present
            with torch.no_grad():
                q_next_online = self.q(kf2, g2, present2).masked_fill(~m2, NEG)
                a_star = q_next_online.argmax(1, keepdim=True)
                q_next = self.target(kf2, g2, present2).gather(1, a_star).squeeze(1)
                any_valid = m2.any(1).float()
                y = r + self.cfg.gamma * (1 - done) * any_valid * q_next
            q = self.q(kf, g, present).gather(1, act[:, None]).squeeze(1)
            loss = F.smooth_l1_loss(q, y)
            optimize(self.q, self.target, self.opt, loss, self.cfg.grad_clip, self.cfg.tau)
            self.updates += 1
            loss_v = float(loss.detach())
        return loss_v
