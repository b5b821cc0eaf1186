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
the nodes whose ``parallelism``/``cycle_length`` equals its value in both. Knobs too many for
distinct values within their bounds are tagged over several rounds. A node counts from
the source end of the main input chain, so nodes tf.data adds on top (options, injected
prefetch) do not shift it. A knob that cannot be located gets no signal; every probe checks
that the node still carries the knob's value before trusting it.

A chain can lose its source end while it runs: once a ``cache()`` is filled, the ops under
it stop and leave the model. Tagging keeps the chain's ops; a probe whose chain is the
tagged one less its first nodes finds each knob's node that many places nearer the source,
and a knob whose node was among those dropped did no work in the window (busy share 0).
Any other change of shape gets no signal.
"""

from __future__ import annotations

import logging
import threading
from typing import NamedTuple

from ..errors import describe_error
from ..knobs import AUTOTUNE, Knob, KnobSpace

log = logging.getLogger(__name__)

PARAMS = ("parallelism", "cycle_length")
# Ops whose recorded processing time is their calls' work. A parallel interleave's is not:
# its cost is largely the per-element hand-off from its worker threads, which the model
# does not time (measured: an interleave limiting the pipeline read as 30% busy), so an
# interleave knob gets no signal rather than a misleading one.
TIMED_OPS = ("ParallelMap", "MapAndBatch", "ParallelBatch", "ParallelFilter")
BATCH_OPS = ("Batch", "MapAndBatch", "ParallelBatch", "PaddedBatch")
FIRST_ELEMENT_S = 1.0
"""How long a tagging build waits for its first element before reading the model anyway:
the first call is what opens every op's input (a shuffle's too), and an element of a
latency-bound pipeline at parallelism 1 can take far longer (256 records of 100 ms GETs:
26 s)."""


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
    # A tunable (AUTOTUNE) parameter's ``value`` is the model's last estimate, often still
    # its minimum; ``state_value`` is the value the op runs with.
    return {p.name: float(p.state_value if p.tunable else p.value) for p in node.parameters}


class Located(NamedTuple):
    """Where tagging found one node a knob drives."""

    pos: int            # chain position, from the source end
    param: str          # "parallelism" or "cycle_length"
    chain: tuple        # the ops of the tagged chain, source first


class NodeReading(NamedTuple):
    """One model node at a snapshot."""

    ns: int             # processing time so far (an interleave's open inputs included)
    params: dict        # parameter name -> the value the op runs with
    op: str             # the node's name: its op, e.g. "ParallelMapV2"
    elements: int       # elements it has produced so far


def snapshot(it) -> dict[int, NodeReading]:
    """Chain position -> :class:`NodeReading`. Inputs beyond the first (an interleave's open
    sub-iterators) count towards their node's time. Safe to take from another thread while
    the iterator is inside ``next()``."""
    proto = _model(it)
    out = {}
    for pos, node in enumerate(_chain(proto)):
        seen = {node.inputs[0]} if node.inputs else set()
        ns = int(node.processing_time) + sum(_subtree_ns(proto, i, seen) for i in node.inputs[1:])
        out[pos] = NodeReading(ns, _params(node), node.name, int(node.num_elements))
    return out


def records_rate(before: dict, after: dict, seconds: float) -> float | None:
    """Records/s the stages under the last batch op produced between two snapshots: a
    pipeline's record rate while its batches are too slow to count at the output. None
    without a batch op, or when that stage had produced nothing by ``before`` (it is still
    starting: a shuffle buffer filling)."""
    if seconds <= 0:
        return None
    batches = [pos for pos, n in after.items() if n.op.startswith(BATCH_OPS) and pos > 0]
    if not batches:
        return None
    feed = max(batches) - 1
    if feed not in before or feed not in after or before[feed].elements <= 0:
        return None
    return max(0, after[feed].elements - before[feed].elements) / seconds


def split_interleaves(stages: dict) -> list[tuple[str, str]]:
    """``(cycle_length knob, num_parallel_calls knob)`` for each interleave whose two are
    driven by two different knobs, from located ``stages`` (knob -> :class:`Located`)."""
    at: dict = {}
    for name, found in stages.items():
        for where in found:
            at.setdefault((where.pos, where.chain), {}).setdefault(where.param, []).append(name)
    return [(cycle, calls) for params in at.values()
            for cycle in params.get("cycle_length", ())
            for calls in params.get("parallelism", ()) if calls != cycle]


def tag_rounds(space: KnobSpace) -> list[list[Knob]]:
    """The parallelism knobs split into tagging rounds, each in declaration order: every knob
    of a round of n admits the values lo..lo+n, so each gets a distinct value in both builds."""
    pending = sorted((k for k in space if k.kind == "parallelism" and k.max > k.min),
                     key=lambda k: (k.max, k.min))      # narrowest first: it bounds its round
    order = {name: i for i, name in enumerate(space.names)}
    rounds = []
    while pending:
        lo, room = pending[0].min, pending[0].max - pending[0].min
        group = [k for k in pending if k.min <= lo][:room]
        rounds.append(sorted(group, key=lambda k: order[k.name]))
        pending = [k for k in pending if k not in group]
    return rounds


def tag_configs(group: list[Knob], base: dict, flip: bool = False) -> tuple[dict, dict]:
    """Two configs tagging one round: the knobs get lo+i, then lo+i+1, the first declared
    the largest (``flip``: the smallest). Values stay in the same order in both builds, as
    an interleave's ``num_parallel_calls`` must not exceed its ``cycle_length``, and
    ``cycle_length`` is usually declared first."""
    lo = max(k.min for k in group)
    ranked = group if flip else group[::-1]
    return tuple({**base, **{k.name: lo + i + shift for i, k in enumerate(ranked)}}
                 for shift in (0, 1))


def _snapshot_of(build_and_iterate, config: dict) -> dict:
    it = build_and_iterate(config)
    try:
        # Some ops (a shuffle) open their input only on the first call: without it the
        # model ends there, and positions counted from the source would not match a probe's.
        # The call runs on a helper thread, so a slow first element is not waited for.
        failure = []

        def first():
            try:
                next(it, None)
            except BaseException as exc:  # noqa: BLE001 - raised below, in the caller
                failure.append(exc)

        pull = threading.Thread(target=first, name="intune-flow-tag", daemon=True)
        pull.start()
        pull.join(FIRST_ELEMENT_S)
        if failure:
            raise failure[0]
        return snapshot(it)
    finally:
        del it


def locate(space: KnobSpace, base: dict, build_and_iterate) -> dict[str, list[Located]]:
    """Knob -> the nodes (:class:`Located`) it drives, from two tagging builds per round.

    ``build_and_iterate(config)`` returns a fresh iterator; one element is pulled and its
    model read. Knobs found nowhere are left out. A round whose builds fail in both
    orders is split in halves; a knob that fails alone is left out and logged, the others
    are still located. Raises only if ``base`` itself does not build.
    """
    todo, stages, failed, base_ok = tag_rounds(space), {}, {}, False
    while todo:
        group = todo.pop(0)
        for flip in (False, True) if len(group) > 1 else (False,):
            configs = tag_configs(group, base, flip)
            try:
                snaps = [_snapshot_of(build_and_iterate, c) for c in configs]
                break
            except Exception as e:  # noqa: BLE001 - a rejected value (e.g. parallelism > cycle)
                error = e
        else:
            if not base_ok:     # a pipeline that never builds: fail once, not per knob
                _snapshot_of(build_and_iterate, base)
                base_ok = True
            if len(group) > 1:
                todo[:0] = [group[:len(group) // 2], group[len(group) // 2:]]
            else:
                failed[group[0].name] = describe_error(error, limit=300)
            continue
        chain = _ops(snaps[0])
        for k in group:
            hits = [{(pos, p) for pos, node in snap.items() for p in PARAMS
                     if node.params.get(p) == config[k.name]}
                    for config, snap in zip(configs, snaps)]
            if hits[0] & hits[1]:
                stages[k.name] = [Located(pos, p, chain) for pos, p in sorted(hits[0] & hits[1])]
    if failed:
        log.info("no stage signals for knob(s) %s: their tagging builds failed (%s)",
                 sorted(failed), "; ".join(sorted(set(failed.values()))))
    return stages


IDLE = "idle"
"""What :func:`_node` answers for a knob whose node left the chain with its source end."""


def _node(where: Located, after: dict, ops: tuple, value) -> int | str | None:
    """The position in ``after`` (whose ops are ``ops``) of the node ``where`` tagged, when
    it carries the knob's ``value`` (any value for AUTOTUNE); :data:`IDLE` when the chain
    lost its source end with that node; None when the graph is not the one tagged."""
    lost = len(where.chain) - len(ops)
    pos = where.pos
    if lost > 0 and where.chain[lost:] == ops:
        if pos < lost:
            return IDLE
        pos -= lost
    node = after.get(pos)
    if node is not None and (value == AUTOTUNE or node.params.get(where.param) == value):
        return pos
    return None


def _ops(snap: dict) -> tuple:
    return tuple(snap[pos].op for pos in sorted(snap))


def _aligned(before: dict, after: dict, ops: tuple) -> dict:
    """``before`` by ``after``'s positions (``after``'s ops are ``ops``): shifted when the
    chain lost its source end in between (a cache filled in the window); only the nodes of
    the same op kept otherwise."""
    lost = len(before) - len(after)
    if lost > 0 and _ops(before)[lost:] == ops:
        return {pos - lost: node for pos, node in before.items() if pos >= lost}
    return {pos: node for pos, node in before.items()
            if pos in after and after[pos].op == node.op}


def stage_signals(stages: dict, before: dict, after: dict, seconds: float,
                  config: dict, pool_knob: str | None) -> dict[str, float]:
    """Busy share (0..1) per located knob, and of the thread pool ``pool_knob`` (the
    implicit ``threadpool``, or the factory's own knob that sizes the pool), over ``seconds``."""
    if seconds <= 0 or not stages:
        return {}
    ops = _ops(after)
    before = _aligned(before, after, ops)
    busy_calls = {}   # chain position -> average calls in flight
    for pos, node in after.items():
        if pos in before and any(p in node.params for p in PARAMS):
            busy_calls[pos] = max(0, node.ns - before[pos].ns) / 1e9 / seconds
    out = {}
    for name, where in stages.items():
        value = config.get(name)
        shares = []
        for located in where:
            pos = _node(located, after, ops, value)
            if pos == IDLE and located.chain[located.pos].startswith(TIMED_OPS):
                shares.append(0.0)
                continue
            if pos is None or pos == IDLE or pos not in busy_calls or \
                    not after[pos].op.startswith(TIMED_OPS):
                shares = []     # the graph is not the one tagged: trust nothing for this knob
                break
            node = after[pos]
            width = node.params.get("parallelism") or node.params.get("cycle_length") or 1.0
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
    out, ops = {}, _ops(after)
    for name, where in stages.items():
        if config.get(name) != AUTOTUNE:
            continue
        nodes = [_node(located, after, ops, AUTOTUNE) for located in where]
        values = {after[pos].params.get(located.param) for pos, located in zip(nodes, where)
                  if pos is not None and pos != IDLE}
        values.discard(None)
        if len(values) == 1:
            out[name] = int(values.pop())
    return out
