"""Framework adapters: what intune_flow needs to know about a tf.data, torchdata or
torch DataLoader dataset.

Each adapter module satisfies :class:`~intune_flow.adapters.protocol.Adapter`. Frameworks
are imported lazily: an adapter only recognizes datasets of a framework already imported
by the factory that built them.
"""

from __future__ import annotations

from importlib import import_module
from typing import cast

from .protocol import Adapter

SUPPORTED = ("tf.data.Dataset, torchdata.nodes.BaseNode, torchdata.nodes.Loader or "
             "torch.utils.data.DataLoader")
_MODULES = (".tfdata", ".torchdata", ".torch_loader")


def adapters() -> list[Adapter]:
    """Every adapter module, in the order datasets are matched."""
    return [cast(Adapter, import_module(name, __name__)) for name in _MODULES]


def adapter_for(obj) -> Adapter | None:
    """The adapter module that handles ``obj``, or None if no supported framework does."""
    for adapter in adapters():
        if adapter.is_dataset(obj):
            return adapter
    return None


def flatten(structure, prefix: str = "") -> list[tuple[str, object]]:
    """(path, leaf) pairs of a nested dict/tuple/list structure; paths join keys with '/'."""
    if isinstance(structure, dict):
        items = [(str(k), v) for k, v in structure.items()]
    elif isinstance(structure, tuple) and hasattr(structure, "_fields"):
        items = list(zip(structure._fields, structure))
    elif isinstance(structure, (tuple, list)):
        items = [(str(i), v) for i, v in enumerate(structure)]
    else:
        return [(prefix or "0", structure)]
    out = []
    for key, value in items:
        out.extend(flatten(value, f"{prefix}/{key}" if prefix else key))
    return out


def normalize_schema(leaves: list[tuple[str, str, list]], batched: bool | None = None
                     ) -> tuple[dict, bool, int | None]:
    """Schema dict (batch dim set to None when batched), whether batched, the static batch size.

    Unless the caller knows (``batched``), an element counts as batched when every leaf
    has rank >= 1 and all leading dimensions agree (None, "unknown", agrees with anything).
    """
    leading = {shape[0] for _, _, shape in leaves if shape}
    could = bool(leaves) and all(shape for _, _, shape in leaves) and len(leading - {None}) <= 1
    batched = could if batched is None else (batched and could)
    schema = {}
    for name, dtype, shape in leaves:
        shape = list(shape)
        if batched:
            shape[0] = None
        schema[name] = {"dtype": dtype, "shape": shape}
    static = next(iter(leading - {None}), None) if batched else None
    return schema, batched, static


def element_schema(element, batched: bool | None = None, list_is_batch: bool = False
                   ) -> tuple[dict, bool, int | None]:
    """Like ``normalize_schema``, from one concrete element (tensors or arrays).

    With ``list_is_batch``, a list is a batch of items, as a torchdata ``Batcher`` yields
    without a collate step: the schema is its first item's, with a leading batch
    dimension. Otherwise a list is a structure, as a DataLoader's collated tuple."""
    if list_is_batch and isinstance(element, list) and element:
        schema, _, _ = element_schema(element[0], batched=False)
        return ({name: {"dtype": leaf["dtype"], "shape": [None, *leaf["shape"]]}
                 for name, leaf in schema.items()}, True, len(element))
    leaves = []
    for name, leaf in flatten(element):
        dtype = getattr(leaf, "dtype", None)
        dtype = getattr(dtype, "name", None) or str(dtype if dtype is not None else type(leaf).__name__)
        shape = [int(d) for d in getattr(leaf, "shape", ())]
        leaves.append((name, dtype.removeprefix("torch."), shape))
    return normalize_schema(leaves, batched)


def leading_dim(element, list_is_batch: bool = False) -> int:
    """Records in one element: a list's length when a list is a batch of items, else the
    leading dimension of its first leaf, or 1 if it has none."""
    if list_is_batch and isinstance(element, list):
        return len(element)
    leaves = flatten(element)
    shape = getattr(leaves[0][1], "shape", None) if leaves else None
    try:
        return int(shape[0]) if shape is not None and len(shape) else 1
    except (TypeError, ValueError):
        return 1
