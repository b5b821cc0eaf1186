"""torch.utils.data.DataLoader adapter: ``num_workers``, ``prefetch_factor`` and the like are
knobs like any other. Like torchdata, a DataLoader has no AUTOTUNE and keeps no per-stage
timings; its worker processes count in the probe's CPU and memory readings."""

from __future__ import annotations

import contextlib
import sys
import warnings

from .object_signature import describe_attrs
from .torchdata import (POOL_KNOB, POOL_OPTION, autotune_choices,  # noqa: F401
                        finalize,
                        implicit_knobs, locate_stages, own_options, prepare_config,
                        records_rate, snapshot,
                        spec_schema, stage_signals)

FRAMEWORK = "torch.utils.data"
LIST_IS_BATCH = False    # default_collate turns a (features, label) tuple into a list
SIGNATURE_PER_PROBE = True
LOADER_ATTRS = ("dataset", "num_workers", "prefetch_factor", "pin_memory", "pin_memory_device",
                "timeout", "worker_init_fn", "multiprocessing_context", "in_order", "batch_size",
                "drop_last", "sampler", "batch_sampler", "generator", "collate_fn",
                "persistent_workers")


def is_dataset(obj) -> bool:
    data = sys.modules.get("torch.utils.data")
    return data is not None and isinstance(obj, data.DataLoader)


def build_signature(ds) -> bytes | None:
    """The loader's settings and the Dataset, sampler and functions it holds, by value (None
    when one holds something not describable so: a lock, a large array). Equal for two
    configs that build the same loader, such as any ``prefetch_factor`` without workers."""
    return describe_attrs(ds, LOADER_ATTRS)


def batch_size(ds) -> int | None:
    """The loader's ``batch_size`` (None with a custom batch sampler or no batching)."""
    return ds.batch_size


@contextlib.contextmanager
def searching_past_the_cores():
    """Hides torch's warning that ``num_workers`` passes the cores it sees, which a search
    triggers on purpose (workers that wait on I/O pay past the cores): not shown while a
    pipeline is built nor while intune_flow's probes iterate it; the user's own loop over
    ``result.build()`` still shows it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning,
                                message=r"This DataLoader will create \d+ worker processes")
        yield


def iterate(ds):
    """An iterator over a new epoch (new workers unless ``persistent_workers``)."""
    with searching_past_the_cores():
        return iter(ds)
