"""The one environment interface every search method talks to: real pipelines and the simulator."""

from __future__ import annotations

from typing import Mapping, Protocol, runtime_checkable

from .knobs import KnobSpace
from .measurement import Measurement


@runtime_checkable
class TuningEnv(Protocol):
    """Something that measures configs. Implemented by the real-pipeline env and by ``sim``.

    ``clock()`` is seconds spent so far (wall seconds for a real pipeline, simulated
    seconds in the simulator); budgets are spent against it.
    """

    space: KnobSpace
    cpu_budget: float   # cores the pipeline may use
    ram_budget: int     # bytes the process may reach

    def measure(self, config: Mapping[str, int]) -> Measurement: ...

    # Optional: ``native_autotune = True`` says AUTOTUNE values hand knobs to the
    # framework's own tuner (tf.data AUTOTUNE): read it with :func:`has_native_autotune`.

    def clock(self) -> float: ...


def kept_from_autotune(env) -> tuple[str, ...]:
    """Knobs a hybrid config keeps static (``env.kept_from_autotune``; none by default):
    those whose AUTOTUNE value the framework fixes when it builds instead of tuning it
    while running."""
    return tuple(getattr(env, "kept_from_autotune", ()) or ())


def has_native_autotune(env) -> bool:
    """Whether ``env``'s framework has its own tuner (tf.data AUTOTUNE): intune then measures
    all-AUTOTUNE once as a floor and a hybrid at its end, its agent may hand single knobs to
    AUTOTUNE, and the black-box baselines sample AUTOTUNE as a value."""
    return bool(getattr(env, "native_autotune", False))
