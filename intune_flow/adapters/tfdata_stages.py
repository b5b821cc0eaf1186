"""Per-stage signals for tf.data, read from the iterator's own autotuning model.

tf.data keeps an analytical model of every iterator (``tf.data.experimental.get_model_proto``):
one node per dataset op with the time its calls spent processing and its parameters
(``parallelism``, ``cycle_length``, ``buffer_size``), whether or not AUTOTUNE is on. Two
snapshots of it bracket a probe's window; a parallel stage's busy share is

    u = processing seconds in the window / (window seconds * parallelism)

the signal the simulator gives the agent (1.0: every call busy, the stage is a bottleneck;
0.2: four in five calls wait on their input or output). The implicit ``threadpool`` knob gets
the busy calls of every parallel stage over the pool size.

Which model node a knob drives is found once per pipeline by *tagging*: two builds in which
each parallelism knob gets a distinct value (a different one in each build); a knob maps to
the nodes whose ``parallelism``/``cycle_length`` equals its value in both. A node counts from
the source end of the main input chain, so nodes tf.data adds on top (options, injected
prefetch) do not shift it. A knob that cannot be located gets no signal; every probe checks
that the node still carries the knob's value before trusting it.
"""

from __future__ import annotations

from ..knobs import AUTOTUNE, KnobSpace

PARAMS = ("parallelism", "cycle_length")
# Ops whose recorded processing time is their calls' work. A parallel interleave's is not:
# its cost is largely the per-element hand-off from its worker threads, which the model
# does not time (measured: an interleave limiting the pipeline read as 30% busy), so an
# interleave knob gets no signal rather than a misleading one.
TIMED_OPS = ("ParallelMap", "MapAndBatch", "ParallelBatch", "ParallelFilter")


def _model(it):
    import tensorflow as tf

    return tf.data.experimental.get_model_proto(it)


def _chain(proto) -> list:
    """Nodes of the main input chain, source first (each node's first input is its input)."""
    out, nid, seen = [], proto.output, set()
    while nid and nid in proto.nodes and nid not in seen:
        seen.add(nid)
        node = proto.nodes[nid]
        out.append(node)
        nid = node.inputs[0] if node.inputs else 0
    out.reverse()
    return out


def _subtree_ns(proto, nid: int, seen: set) -> int:
    if nid in seen or nid not in proto.nodes:
        return 0
    seen.add(nid)
    node = proto.nodes[nid]
    return int(node.processing_time) + sum(_subtree_ns(proto, i, seen) for i in node.inputs)


def _params(node) -> dict[str, float]:
    return {p.name: float(p.value) for p in node.parameters}


def snapshot(it) -> dict[int, tuple[int, dict[str, float], str]]:
    """Chain position -> (processing ns so far, parameters, op name). Inputs beyond the
    first (an interleave's open sub-iterators) count towards their node's time."""
    proto = _model(it)
    out = {}
    for pos, node in enumerate(_chain(proto)):
        seen = {node.inputs[0]} if node.inputs else set()
        ns = int(node.processing_time) + sum(_subtree_ns(proto, i, seen) for i in node.inputs[1:])
        out[pos] = (ns, _params(node), node.name)
    return out


def tag_configs(space: KnobSpace, base: dict) -> tuple[dict, dict] | None:
    """Two configs giving each parallelism knob a value no other knob has, and a different
    one in each (small values: a tagging build should not load the machine)."""
    # Narrowest ranges first, so a knob with two possible values still gets both.
    knobs = sorted((k for k in space if k.kind == "parallelism" and k.max > k.min),
                   key=lambda k: k.max - k.min)
    if not knobs:
        return None
    first: dict[str, int] = {}
    second: dict[str, int] = {}
    for tags in (first, second):
        for k in knobs:
            avoid = set(tags.values()) | ({first[k.name]} if tags is second else set())
            value = next((v for v in range(max(2, k.min), k.max + 1) if v not in avoid), None)
            if value is None:
                value = next((v for v in range(k.min, k.max + 1) if v not in avoid), None)
            if value is not None:
                tags[k.name] = value
    return {**base, **first}, {**base, **second}


def locate(space: KnobSpace, base: dict, build_and_iterate) -> dict[str, list[tuple[int, str]]]:
    """Knob -> [(chain position, parameter name)] from two tagging builds.

    ``build_and_iterate(config)`` returns a fresh iterator; only its model is read (no
    element is pulled). Knobs found nowhere, or not the same way twice, are left out.
    """
    configs = tag_configs(space, base)
    if configs is None:
        return {}
    found: list[dict[str, set]] = []
    for config in configs:
        it = build_and_iterate(config)
        try:
            snap = snapshot(it)
        finally:
            del it
        hits: dict[str, set] = {}
        for name, value in config.items():
            if name not in space or space[name].kind != "parallelism":
                continue
            hits[name] = {(pos, p) for pos, (_, params, _) in snap.items()
                          for p in PARAMS if params.get(p) == value}
        found.append(hits)
    stages = {}
    for name in found[0]:
        both = found[0][name] & found[1].get(name, set())
        if both and configs[0][name] != configs[1][name]:
            stages[name] = sorted(both)
    return stages


def stage_signals(stages: dict, before: dict, after: dict, seconds: float,
                  config: dict, pool_knob: str | None) -> dict[str, float]:
    """Busy share (0..1) per located knob, and of the thread pool ``pool_knob`` (the
    implicit ``threadpool``, when intune_flow applies it), over ``seconds``."""
    if seconds <= 0 or not stages:
        return {}
    busy_calls = {}   # chain position -> average calls in flight
    for pos, (ns, params, _) in after.items():
        if pos in before and any(p in params for p in PARAMS):
            busy_calls[pos] = max(0, ns - before[pos][0]) / 1e9 / seconds
    out = {}
    for name, where in stages.items():
        value = config.get(name)
        shares = []
        for pos, param in where:
            _, params, op = after.get(pos, (0, {}, ""))
            if pos not in busy_calls or not op.startswith(TIMED_OPS) or (
                    value != AUTOTUNE and params.get(param) != value):
                shares = []     # the graph is not the one tagged: trust nothing for this knob
                break
            width = params.get("parallelism") or params.get("cycle_length") or 1.0
            shares.append(busy_calls[pos] / max(width, 1.0))
        if shares:
            out[name] = min(1.0, max(shares))
    pool = config.get(pool_knob) if pool_knob else None
    if pool and pool > 0 and busy_calls:
        out[pool_knob] = min(1.0, sum(busy_calls.values()) / pool)
    return out


def autotune_choices(stages: dict, after: dict, config: dict) -> dict[str, int]:
    """The parallelism tf.data's AUTOTUNE holds, at the snapshot, for each located knob the
    config leaves to it (what AUTOTUNE chose, which tf.data itself does not show)."""
    out = {}
    for name, where in stages.items():
        if config.get(name) != AUTOTUNE:
            continue
        values = {after[pos][1].get("parallelism") for pos, _ in where if pos in after}
        values.discard(None)
        if len(values) == 1:
            out[name] = int(values.pop())
    return out
