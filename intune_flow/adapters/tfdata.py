"""tf.data adapter: the implicit ``threadpool`` knob, options, and schema from ``element_spec``."""

from __future__ import annotations

import sys

from ..knobs import AUTOTUNE, Knob
from . import flatten, normalize_schema, tfdata_stages
from .tfdata_stages import autotune_choices, snapshot  # noqa: F401 - part of the adapter API

FRAMEWORK = "tf.data"
LIST_IS_BATCH = False
THREADPOOL = "threadpool"


def is_dataset(obj) -> bool:
    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(obj, tf.data.Dataset)


def implicit_knobs() -> list[Knob]:
    """tf.data's private thread pool: blocking map/interleave calls (remote reads) get at most
    this many threads; tf.data's default pool is sized to the core count."""
    return [Knob(THREADPOOL, "threads", 1, 256, AUTOTUNE)]


def prepare_config(space, config: dict, cpu_budget: float) -> dict:
    return config  # tf.data takes AUTOTUNE (-1) natively


def finalize(ds, config: dict, implicit: tuple[str, ...]):
    """Apply options the factory does not set itself: the private thread-pool size."""
    import tensorflow as tf

    size = config.get(THREADPOOL, AUTOTUNE) if THREADPOOL in implicit else AUTOTUNE
    if size == AUTOTUNE:
        return ds
    options = tf.data.Options()
    options.threading.private_threadpool_size = int(size)
    return ds.with_options(options)


def spec_schema(ds) -> tuple[dict, bool, int | None]:
    """Schema from ``element_spec``: batched when leading dims are unknown (``batch()``
    without ``drop_remainder``) or equal the size of a ``batch()`` found in the graph."""
    leaves = []
    for name, spec in flatten(ds.element_spec):
        shape = getattr(spec, "shape", None)
        dims = list(shape.as_list()) if shape is not None and shape.rank is not None else []
        leaves.append((name, getattr(getattr(spec, "dtype", None), "name", str(spec)), dims))
    size = batch_size(ds)
    leading = {dims[0] if dims else "scalar" for _, _, dims in leaves}
    return normalize_schema(leaves, batched=leading == {None} or leading == {size})


def batch_size(ds) -> int | None:
    """The batch size of the last ``batch()`` in the dataset graph, if one is found."""
    node = ds
    for _ in range(64):
        size = getattr(node, "_batch_size", None)
        if size is not None:
            try:
                return int(size.numpy()) if hasattr(size, "numpy") else int(size)
            except (TypeError, ValueError):
                return None
        node = getattr(node, "_input_dataset", None)
        if node is None:
            return None
    return None


def iterate(ds):
    return iter(ds)


def locate_stages(space, build_and_iterate) -> dict:
    """Knob -> model nodes it drives (see ``tfdata_stages``); {} when none can be located."""
    return tfdata_stages.locate(space, space.defaults(), build_and_iterate)


def stage_signals(stages, before, after, seconds, config, implicit) -> dict[str, float]:
    return tfdata_stages.stage_signals(stages, before, after, seconds, config,
                                       THREADPOOL if THREADPOOL in implicit else None)
