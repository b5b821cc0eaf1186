"""The InTune agent: a DQN over per-knob up/down/stop actions, its observation and its weights."""

from .dqn import DQNAgent, DQNConfig, ReplayBuffer, linear_schedule
from .observation import WalkView, action_mask, encode
from .policy_io import (PolicyError, load_default_policy, load_policy, policy_from_bytes,
                        policy_to_bytes, save_policy, validate_policy)

__all__ = ["DQNAgent", "DQNConfig", "PolicyError", "ReplayBuffer", "WalkView", "action_mask",
           "encode", "linear_schedule", "load_default_policy", "load_policy", "policy_from_bytes",
           "policy_to_bytes", "save_policy", "validate_policy"]
