"""Refuse a worker-side pipeline that calls back into Python, before any worker starts.

``tf.py_function`` / ``tf.numpy_function`` ops (``EagerPyFunc``, ``PyFunc``,
``PyFuncStateless``) call a Python function that lives in the process that built the
dataset; a tf.data service worker in another process cannot run it.
"""

from __future__ import annotations

import re

from ..errors import PipelineError

PY_OPS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc"})
_PY_CALL = {"PyFunc": "tf.numpy_function", "PyFuncStateless": "tf.numpy_function",
            "EagerPyFunc": "tf.py_function"}
# tf.data names a transformation's traced function after it and the Python function it
# wraps: ``__inference_Dataset_map_parse_16`` is ``ds.map(parse)``.
_TRACED = re.compile(r"^__inference_Dataset_(flat_map|map|interleave|filter|scan|"
                     r"parallel_interleave|group_by_window|reduce)_(.+)_\d+$")


def python_stages(dataset) -> list[tuple[str, str, str]]:
    """``(dataset op node, function, py op)`` for every Python callback in ``dataset``'s graph,
    following functions that call functions."""
    from tensorflow.core.framework import graph_pb2
    from tensorflow.python.data.ops.options import ExternalStatePolicy

    graph = graph_pb2.GraphDef()
    graph.ParseFromString(dataset._as_serialized_graph(
        external_state_policy=ExternalStatePolicy.IGNORE).numpy())
    library = {f.signature.name: f for f in graph.library.function}
    memo: dict[str, list[tuple[str, str]]] = {}

    def called(attrs) -> list[str]:
        names = []
        for value in attrs.values():
            if value.HasField("func"):
                names.append(value.func.name)
            elif value.HasField("list"):
                names.extend(f.name for f in value.list.func)
        return names

    def in_function(name: str, seen: frozenset) -> list[tuple[str, str]]:
        if name in memo:
            return memo[name]
        found: list[tuple[str, str]] = []
        fn = library.get(name)
        if fn is not None and name not in seen:
            for node in fn.node_def:
                if node.op in PY_OPS:
                    found.append((name, node.op))
                for inner in called(node.attr) + ([node.op] if node.op in library else []):
                    found.extend(in_function(inner, seen | {name}))
        memo[name] = found
        return found

    stages = []
    for node in graph.node:
        if node.op in PY_OPS:
            stages.append((node.name, "", node.op))
        for fname in called(node.attr):
            for function, op in in_function(fname, frozenset()):
                stages.append((f"{node.name} ({node.op})", function, op))
    return stages


def check_worker_side(dataset, what: str = "the worker-side pipeline") -> None:
    """Raise :class:`~intune_flow.errors.PipelineError` naming each stage of ``dataset`` (the
    part that runs on tf.data service workers) that calls Python, and the fix."""
    stages = python_stages(dataset)
    if not stages:
        return
    listed = "; ".join(_described(*stage) for stage in dict.fromkeys(stages))
    raise PipelineError(
        f"{what} calls Python (tf.py_function / tf.numpy_function), which a tf.data service "
        f"worker in another process cannot run: {listed}. Fix: move that stage to the "
        "trainer side, after the split (apply it to the distributed dataset), or write it "
        "with TF ops.")


def _described(node: str, function: str, op: str) -> str:
    """A Python stage as its user wrote it where the traced name tells (``map(parse) calls
    tf.py_function``), with the graph node for the rest."""
    call = _PY_CALL.get(op, op)
    traced = _TRACED.match(function)
    if traced:
        return f"{traced[1]}({traced[2]}) calls {call} (graph node {node})"
    return f"stage {node}" + (f", function {function}" if function else "") + f" calls {call}"
