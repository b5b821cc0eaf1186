"""Airflow integration: :class:`InTuneOperator` and the :func:`intune_task` TaskFlow decorator.

Imported lazily: Airflow loads :mod:`intune_flow.airflow.provider` while it configures
itself, so this package must not import Airflow at import time.
"""

from importlib import import_module

_LAZY = {
    "InTuneOperator": ".operator",
    "intune_task": ".decorators",
    "IntuneContext": ".decorators",
    "task_intune": ".decorators",
    "get_provider_info": ".provider",
}


def __getattr__(name):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'intune_flow.airflow' has no attribute {name!r}")


__all__ = list(_LAZY)
