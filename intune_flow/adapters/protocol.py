"""``Adapter``: what intune_flow needs to know about one framework's datasets.

Each adapter is a module (``tfdata``, ``torchdata``, ``torch_loader``) that satisfies this
protocol; a type checker checks modules against protocols (PEP 544), and
``tests/test_pipeline.py`` checks each module at run time.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Protocol, runtime_checkable

from ..knobs import Knob, KnobSpace


@runtime_checkable
class Adapter(Protocol):
    FRAMEWORK: str
    """``"tf.data"``, ``"torchdata"`` or ``"torch.utils.data"``."""
    LIST_IS_BATCH: bool
    """Whether a Python list the dataset yields is a batch of items."""
    POOL_OPTION: str | None
    """The option that sizes the framework's shared thread pool (tf.data:
    ``private_threadpool_size``), None where there is none."""
    POOL_KNOB: str | None
    """The implicit knob that sets ``POOL_OPTION`` (tf.data: ``threadpool``)."""
    SIGNATURE_PER_PROBE: bool
    """Whether a probe first compares the config's build with those measured before, so a
    config that builds a pipeline already measured under another config is not measured
    again (DataLoader: any ``prefetch_factor`` without workers)."""

    def is_dataset(self, obj: Any) -> bool:
        """True for a dataset of this framework (only if the framework is already imported)."""

    def implicit_knobs(self, ds: Any = None) -> list[Knob]:
        """Knobs intune_flow adds to pipelines of this framework (tf.data: ``threadpool``),
        less those whose option the dry-built dataset ``ds`` already sets itself."""

    def own_options(self, ds: Any) -> dict:
        """Options intune_flow would set that the dataset sets itself, by option name."""

    def build_signature(self, ds: Any) -> bytes | None:
        """A comparable description of what a built dataset does (None where unavailable):
        two builds with equal signatures run the same pipeline."""

    def prepare_config(self, space: KnobSpace, config: dict, cpu_budget: float) -> dict:
        """The config the factory sees (torchdata: AUTOTUNE replaced by concrete values)."""

    def finalize(self, ds: Any, config: dict, implicit: tuple[str, ...]) -> Any:
        """The built dataset with the implicit knobs applied."""

    def spec_schema(self, ds: Any, batched: bool | None = None
                    ) -> tuple[dict, bool, int | None] | None:
        """(schema, batched, static batch size) from the graph, None when only data tells;
        ``batched`` when the factory stated whether an element holds several records."""

    def batch_size(self, ds: Any) -> int | None:
        """Records per element when the graph says so."""

    def iterate(self, ds: Any) -> Iterator:
        """An iterator over a new epoch."""

    def locate_stages(self, space: KnobSpace, build_and_iterate: Callable[[dict], Iterator]) -> dict:
        """Knob -> the framework's model nodes it drives ({} where none are kept)."""

    def snapshot(self, iterator: Iterator) -> Any:
        """The framework's per-stage timings so far, one entry per stage it keeps (a later
        reading of the same iterator with fewer entries lost stages); None where it keeps
        none."""

    def stage_signals(self, stages: dict, before: Any, after: Any, seconds: float, config: dict,
                      pool_knob: str | None) -> dict[str, float]:
        """Busy share (0..1) per knob between two snapshots ``seconds`` apart, and of the
        thread pool that ``pool_knob`` sizes (None: no knob sizes one)."""

    def records_rate(self, before: Any, after: Any, seconds: float) -> float | None:
        """Records/s the stages feeding the output's batches produced between two snapshots
        (None where the framework keeps no per-stage counts, or they do not tell)."""

    def autotune_choices(self, stages: dict, after: Any, config: dict) -> dict[str, int]:
        """Knob -> the value the framework's AUTOTUNE held, for knobs left to AUTOTUNE."""
