"""The Q-network: one shared per-knob head, so any number of knobs works with the same weights.

Each knob's features are concatenated with the global features and passed through
the same MLP, giving Q of each of the knob's moves (up, down, AUTOTUNE:
:data:`~.observation.MOVES`); a stop head reads the mean-
and max-pooled knob embeddings plus the global features.
"""

from __future__ import annotations

import torch
from torch import nn

from .observation import GLOBAL_FEATURES, KNOB_FEATURES, MOVES

HIDDEN = 64
NEG = -1e9


class QNet(nn.Module):
    """Q(s, .) over 3K + 1 actions: [up_0, down_0, auto_0, ..., auto_{K-1}, stop]."""

    def __init__(self, hidden: int = HIDDEN):
        super().__init__()
        self.hidden = hidden
        self.knob = nn.Sequential(nn.Linear(KNOB_FEATURES + GLOBAL_FEATURES, hidden), nn.ReLU(),
                                  nn.Linear(hidden, hidden), nn.ReLU())
        self.move = nn.Linear(hidden, len(MOVES))
        self.stop = nn.Sequential(nn.Linear(2 * hidden + GLOBAL_FEATURES, hidden), nn.ReLU(),
                                  nn.Linear(hidden, 1))

    def forward(self, knobs: torch.Tensor, glob: torch.Tensor,
                present: torch.Tensor | None = None) -> torch.Tensor:
        """knobs [B, K, F], glob [B, G], present [B, K] bool (padding False) -> Q [B, 3K + 1]."""
        b, k, _ = knobs.shape
        if present is None:
            present = torch.ones(b, k, dtype=torch.bool, device=knobs.device)
        x = torch.cat([knobs, glob.unsqueeze(1).expand(b, k, glob.shape[-1])], dim=-1)
        h = self.knob(x)                                        # [B, K, H]
        moves = self.move(h).reshape(b, len(MOVES) * k)
        pm = present.unsqueeze(-1).float()
        count = pm.sum(1).clamp(min=1.0)
        mean = (h * pm).sum(1) / count
        mx = torch.where(present.unsqueeze(-1), h, torch.full_like(h, NEG)).amax(1)
        mx = torch.where(present.any(1, keepdim=True), mx, torch.zeros_like(mx))
        stop = self.stop(torch.cat([mean, mx, glob], dim=-1))
        return torch.cat([moves, stop], dim=-1)
