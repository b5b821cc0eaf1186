"""torchdata.nodes adapter. torchdata has no AUTOTUNE: AUTOTUNE values are resolved to
``KnobSpace.concretize`` values (parallelism = cores, buffer = 2) before the factory runs."""

from __future__ import annotations

import sys


FRAMEWORK = "torchdata"
LIST_IS_BATCH = True     # a Batcher without a collate step yields a list of items
POOL_OPTION = None       # no framework-wide thread pool: workers are per stage
POOL_KNOB = None
SIGNATURE_PER_PROBE = False


def _types():
    nodes = sys.modules.get("torchdata.nodes")
    return (nodes.BaseNode, nodes.Loader) if nodes is not None else ()


def is_dataset(obj) -> bool:
    types = _types()
    return bool(types) and isinstance(obj, types)


def implicit_knobs(ds=None) -> list:
    return []


def own_options(ds) -> dict:
    return {}


def build_signature(ds) -> None:
    return None  # no serializable graph: knobs are not compared by build


def prepare_config(space, config: dict, cpu_budget: float) -> dict:
    return space.concretize(config, cpu_budget)


def finalize(ds, config: dict, implicit: tuple[str, ...]):
    return ds


def spec_schema(ds, batched=None):
    return None  # known only from the first batch


def batch_size(ds) -> int | None:
    """``batch_size`` of the first Batcher found walking the node graph from the root."""
    node = ds
    for _ in range(64):
        if type(node).__name__ == "Batcher":
            return int(node.batch_size)
        node = getattr(node, "root", None) or getattr(node, "source", None)
        if node is None:
            return None
    return None


def iterate(ds):
    """An iterator over a new epoch: a ``Loader`` resets its root itself; a bare node, once
    exhausted, is reset here (its ``__iter__`` returns the node as it is)."""
    types = _types()
    if types and isinstance(ds, types[0]):    # BaseNode
        ds.reset()
    return iter(ds)


def locate_stages(space, build_and_iterate) -> dict:
    return {}  # torchdata.nodes keeps no per-stage timings: no signals


def snapshot(it):
    return None


def stage_signals(stages, before, after, seconds, config, pool_knob) -> dict[str, float]:
    return {}


def records_rate(before, after, seconds) -> float | None:
    return None  # no per-stage model: records are counted at the output only


def autotune_choices(stages, after, config) -> dict[str, int]:
    return {}  # AUTOTUNE is resolved before the factory runs: the config holds the values
