"""The ``@intune`` step decorator, as Metaflow's plugin loader finds it."""

from intune_flow.metaflow.decorator import IntuneDecorator

__all__ = ["IntuneDecorator"]
