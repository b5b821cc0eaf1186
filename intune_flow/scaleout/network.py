"""The cluster agent's network: an MLP over the walk's features, one Q-value per K move or
stop (as :mod:`intune_flow.agent.network` is the node agent's)."""

from __future__ import annotations

import torch
from torch import nn

from .observation import ACTIONS, FEATURES

HIDDEN = 64


class ScaleQNet(nn.Module):
    """Q(s, .) over the K moves of :data:`~intune_flow.scaleout.observation.ACTIONS`."""

    def __init__(self, hidden: int = HIDDEN):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(FEATURES, hidden), nn.ReLU(),
                                  nn.Linear(hidden, hidden), nn.ReLU(),
                                  nn.Linear(hidden, len(ACTIONS)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)
