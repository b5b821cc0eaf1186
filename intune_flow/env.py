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

    # Optional: ``native_autotune = True`` says measuring ``space.autotune()`` runs the
    # framework's own tuner (tf.data AUTOTUNE); intune then measures it once as a reference.

    def clock(self) -> float: ...
