"""The cluster agent's DQN over its network (:mod:`~intune_flow.scaleout.network`).

Same recipe as the node agent (:mod:`intune_flow.agent.dqn`): replay buffer,
double-DQN targets from a Polyak-averaged target network, Huber loss, clipped
gradients; the observation is a fixed-size vector here, so the network is plain.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..agent.dqn import DQNConfig, greedy, optimize
from ..agent.network import NEG
from .network import ScaleQNet
from .observation import ACTIONS, FEATURES
from .policy_io import validate_cluster_policy


@dataclass
class ScaleDQNConfig(DQNConfig):
    """The node agent's hyperparameters with a longer horizon and a smaller replay (``k_pad``
    is unused: the observation has no knob slots)."""

    gamma: float = 0.95
    buffer_size: int = 50_000
    eps_fraction: float = 0.6


class ScaleDQN:
    """Online and target networks, optimizer and replay; ``act`` is greedy unless exploring."""

    def __init__(self, config: ScaleDQNConfig | None = None, state: dict | None = None,
                 seed: int | None = 0):
        self.cfg = config or ScaleDQNConfig()
        self.rng = np.random.default_rng(seed)
        if seed is not None:
            torch.manual_seed(seed)
        self.q, self.target = self._networks(state)
        self.opt = None     # made on the first learn(): acting alone needs no optimizer
        c, n = self.cfg.buffer_size, len(ACTIONS)
        self.obs = np.zeros((c, FEATURES), np.float32)
        self.obs2 = np.zeros_like(self.obs)
        self.act_ = np.zeros(c, np.int64)
        self.rew = np.zeros(c, np.float32)
        self.mask2 = np.zeros((c, n), bool)
        self.done = np.zeros(c, np.float32)
        self.size = self.pos = 0
        self.updates = 0

    def _networks(self, state: dict | None) -> tuple[ScaleQNet, ScaleQNet]:
        """(online, target) networks, the online one loaded from validated ``state`` if given."""
        online, target = ScaleQNet(self.cfg.hidden), ScaleQNet(self.cfg.hidden)
        if state is not None:
            clean = validate_cluster_policy(state, self.cfg.hidden)
            online.load_state_dict({k: torch.from_numpy(v) for k, v in clean.items()})
        target.load_state_dict(online.state_dict())
        return online, target

    def state(self) -> dict[str, np.ndarray]:
        return {k: v.detach().cpu().numpy().copy() for k, v in self.q.state_dict().items()}

    def act(self, obs: np.ndarray, mask: np.ndarray, epsilon: float = 0.0) -> int:
        """Index of the chosen action among the valid ones in ``mask``."""
        valid = np.flatnonzero(mask)
        if epsilon > 0 and self.rng.random() < epsilon:
            return int(self.rng.choice(valid))
        with torch.no_grad():
            q = self.q(torch.from_numpy(obs)[None])[0].numpy()
        return greedy(q, mask)

    def remember(self, obs, action: int, reward: float, obs2, mask2, done: bool) -> None:
        i = self.pos
        self.obs[i], self.act_[i], self.rew[i] = obs, action, reward
        self.obs2[i], self.mask2[i], self.done[i] = obs2, mask2, float(done)
        self.pos = (i + 1) % self.cfg.buffer_size
        self.size = min(self.size + 1, self.cfg.buffer_size)

    def learn(self) -> float | None:
        """One gradient step on replayed transitions; returns the loss."""
        if self.size < self.cfg.batch_size:
            return None
        idx = self.rng.integers(0, self.size, size=self.cfg.batch_size)
        t = torch.from_numpy
        obs, act, r = t(self.obs[idx]), t(self.act_[idx]), t(self.rew[idx])
        obs2, m2, done = t(self.obs2[idx]), t(self.mask2[idx]), t(self.done[idx])
        with torch.no_grad():
            a_star = self.q(obs2).masked_fill(~m2, NEG).argmax(1, keepdim=True)
            q_next = self.target(obs2).gather(1, a_star).squeeze(1)
            y = r + self.cfg.gamma * (1 - done) * m2.any(1).float() * q_next
        q = self.q(obs).gather(1, act[:, None]).squeeze(1)
        loss = F.smooth_l1_loss(q, y)
        if self.opt is None:
            self.opt = torch.optim.Adam(self.q.parameters(), lr=self.cfg.lr)
        optimize(self.q, self.target, self.opt, loss, self.cfg.grad_clip, self.cfg.tau)
        self.updates += 1
        return float(loss.detach())
