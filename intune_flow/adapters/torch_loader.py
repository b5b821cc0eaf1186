"""torch.utils.data.DataLoader adapter: ``num_workers``, ``prefetch_factor`` and the like are
knobs like any other. Like torchdata, a DataLoader has no AUTOTUNE and keeps no per-stage
timings; its worker processes count in the probe's CPU and memory readings."""

from __future__ import annotations

import sys

from .torchdata import (POOL_KNOB, POOL_OPTION, autotune_choices,  # noqa: F401
                        build_signature, finalize,
                        implicit_knobs, locate_stages, own_options, prepare_config,
                        records_rate, snapshot,
                        spec_schema, stage_signals)

FRAMEWORK = "torch.utils.data"
LIST_IS_BATCH = False    # default_collate turns a (features, label) tuple into a list


def is_dataset(obj) -> bool:
    data = sys.modules.get("torch.utils.data")
    return data is not None and isinstance(obj, data.DataLoader)


def batch_size(ds) -> int | None:
    """The loader's ``batch_size`` (None with a custom batch sampler or no batching)."""
    return ds.batch_size


def iterate(ds):
    """An iterator over a new epoch (new workers unless ``persistent_workers``)."""
    return iter(ds)
