"""The InTune agent: a DQN over per-knob up/down/stop actions, its observation and its weights.

Names are imported lazily: the walk and the observation need only numpy, so
baselines and the simulator run without importing torch.
"""

from importlib import import_module

_LAZY = {
    "DQNAgent": ".dqn", "DQNConfig": ".dqn", "ReplayBuffer": ".dqn", "linear_schedule": ".dqn",
    "WalkView": ".observation", "action_mask": ".observation", "encode": ".observation",
    "Walk": ".walk",
    "PolicyError": ".policy_io", "load_default_policy": ".policy_io", "load_policy": ".policy_io",
    "policy_from_bytes": ".policy_io", "policy_to_bytes": ".policy_io",
    "save_policy": ".policy_io", "validate_policy": ".policy_io",
}


def __getattr__(name):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'intune_flow.agent' has no attribute {name!r}")


__all__ = sorted(_LAZY)
