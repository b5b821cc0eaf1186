"""tf.data adapter: the implicit ``threadpool`` knob, options, and schema from ``element_spec``."""

from __future__ import annotations

import re
import sys

from ..knobs import AUTOTUNE, Knob
from . import flatten, normalize_schema, object_signature, tfdata_stages
from .tfdata_stages import (autotune_choices, records_rate,  # noqa: F401 - adapter API
                            snapshot)

FRAMEWORK = "tf.data"
LIST_IS_BATCH = False
THREADPOOL = "threadpool"
POOL_OPTION = "private_threadpool_size"
POOL_KNOB = THREADPOOL
# Every move changes the graph: serializing it per probe would cost more than it spares.
SIGNATURE_PER_PROBE = False


def is_dataset(obj) -> bool:
    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(obj, tf.data.Dataset)


def implicit_knobs(ds=None) -> list[Knob]:
    """tf.data's private thread pool: blocking map/interleave calls (remote reads) get at most
    this many threads; tf.data's default pool is sized to the core count. None when the
    dataset ``ds`` (the dry build) sets the pool itself (:func:`own_options`)."""
    if ds is not None and own_options(ds):
        return []
    return [Knob(THREADPOOL, "threads", 1, 256, AUTOTUNE)]


def own_options(ds) -> dict:
    """The options intune_flow would set that the dataset already sets itself, by name."""
    try:
        size = ds.options().threading.private_threadpool_size
    except Exception:  # noqa: BLE001 - a dataset without readable options sets none
        return {}
    return {} if size is None else {POOL_OPTION: int(size)}


def prepare_config(space, config: dict, cpu_budget: float) -> dict:
    return config  # tf.data takes AUTOTUNE (-1) natively


def finalize(ds, config: dict, implicit: tuple[str, ...]):
    """Apply options the factory does not set itself: the private thread-pool size (never
    over a pool the dataset sets itself)."""
    import tensorflow as tf

    size = config.get(THREADPOOL, AUTOTUNE) if THREADPOOL in implicit else AUTOTUNE
    if size == AUTOTUNE or own_options(ds):
        return ds
    options = tf.data.Options()
    options.threading.private_threadpool_size = int(size)
    return ds.with_options(options)


def spec_schema(ds, batched: bool | None = None) -> tuple[dict, bool, int | None]:
    """Schema from ``element_spec``: batched when leading dims are unknown (``batch()``
    without ``drop_remainder``), are the size of a ``batch()`` found in the graph or
    unknown (a map after ``batch(drop_remainder=True)`` whose output loses the static
    size on some leaf: a ragged feature padded with ``to_tensor()``), or, with no
    ``batch()``, are one static size above 1 shared by every leaf of a structure of
    several (an element that is a block of rows: a row group, an object; a lone tensor
    stays one record, as a vector or an image is). A leaf of unknown rank (a
    ``numpy_function``'s output) under a ``batch()`` has at least the batch dimension:
    ``[None]``. ``batched`` (the factory stated its records per element) overrides the guess."""
    size = batch_size(ds)
    leaves = []
    for name, spec in flatten(ds.element_spec):
        shape = getattr(spec, "shape", None)
        if shape is not None and shape.rank is not None:
            dims = list(shape.as_list())
        else:
            dims = [None] if shape is not None and size is not None else []
        leaves.append((name, _leaf_dtype(spec), dims))
    if batched is None:
        leading = {dims[0] if dims else "scalar" for _, _, dims in leaves}
        block = (size is None and len(leaves) > 1 and len(leading) == 1
                 and isinstance(next(iter(leading)), int) and next(iter(leading)) > 1)
        batched = leading == {None} or (size is not None and leading <= {None, size}) or block
    return normalize_schema(leaves, batched=batched)


LEAF_KINDS = {"SparseTensorSpec": "sparse", "RaggedTensorSpec": "ragged"}


def _leaf_dtype(spec) -> str:
    """A leaf's dtype name, prefixed by its kind where it is not a dense tensor (``sparse
    int64``, ``ragged string``): a feature that turns from dense to sparse or ragged keeps
    its dtype and shape, but not its cost, so the schema (and the fingerprint) tell them
    apart. Dense leaves read as before, so their fingerprints do not move."""
    dtype = getattr(getattr(spec, "dtype", None), "name", str(spec))
    kind = LEAF_KINDS.get(type(spec).__name__)
    return f"{kind} {dtype}" if kind else dtype


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


def stage_signals(stages, before, after, seconds, config, pool_knob) -> dict[str, float]:
    return tfdata_stages.stage_signals(stages, before, after, seconds, config, pool_knob)


_UNIQUE = re.compile(rb"[_:]\d+")


def build_signature(ds) -> bytes | None:
    """What a built dataset does, comparable between builds: its serialized graph (function
    and py_function names made build-independent), its options, and the Python functions
    the graph calls (``from_generator``, ``numpy_function``, ``py_function``) by value, the
    values their closures captured included (:func:`python_calls`); None if unreadable."""
    return _signature(ds, python=True)


def graph_signature(ds) -> bytes | None:
    """:func:`build_signature` without the Python functions: two builds that differ only in
    what their Python functions captured have the same one."""
    return _signature(ds, python=False)


def _signature(ds, python: bool) -> bytes | None:
    try:
        import tensorflow as tf

        policy = tf.data.experimental.ExternalStatePolicy.IGNORE
        raw = ds._as_serialized_graph(external_state_policy=policy).numpy()
        # Text, not bytes: map entries come sorted, and numbered names can be made
        # build-independent without length prefixes telling them apart.
        graph = tf.compat.v1.GraphDef.FromString(raw)
        calls = python_calls(graph) if python else []
        if calls is None:
            return None
        for node in [*graph.node, *(n for f in graph.library.function for n in f.node_def)]:
            if "metadata" in node.attr:     # a dataset's name, numbered per process
                del node.attr["metadata"]
        # The function library comes in any order: sort it once names are normalized.
        functions = sorted(_UNIQUE.sub(b"_N", str(f).encode()) for f in graph.library.function)
        graph.ClearField("library")
        options = ds.options()._to_proto().SerializeToString(deterministic=True)
    except Exception:  # noqa: BLE001 - no signature: nothing is compared
        return None
    return b"\n".join([_UNIQUE.sub(b"_N", str(graph).encode()), *functions, options, *calls])


def python_calls(graph) -> list[bytes] | None:
    """The Python functions a dataset's graph calls (its ``PyFunc`` and ``EagerPyFunc`` ops,
    looked up by token in TensorFlow's registry), each described by value, sorted; None when
    one cannot be found or described (a re-entrant lock, an open file, a large array): then
    nothing is compared.

    The graph names such a function only by a token numbered per process, so without this
    two builds whose generator or ``numpy_function`` captured different knob values (a
    Python thread pool's size) would compare equal, and the knob be called inert."""
    from tensorflow.python.ops import script_ops

    out = []
    for node in [*graph.node, *(n for f in graph.library.function for n in f.node_def)]:
        if "PyFunc" not in node.op:
            continue
        func = script_ops._py_funcs.get(node.attr["token"].s.decode())
        described = object_signature.describe(func) if func is not None else None
        if described is None:
            return None
        out.append(described)
    return sorted(out)
