"""A pipeline reference (``"package.module:factory"``) checked from source, without importing it.

Flows are built, and DAG files parsed, in processes that never build the pipeline:
importing its module there would import TensorFlow each time. Reading the module's source
with :mod:`ast` finds a misspelled factory and a factory argument that does not exist
before anything runs. Whatever the source cannot tell (no source file, names made at run
time, a factory bound by assignment) is left to the task, where the module is imported.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import PipelineError, did_you_mean

_DYNAMIC = re.compile(r"\b(exec|setattr|globals|__getattr__)\b|sys\.modules|import \*")


@dataclass
class FactorySource:
    """What a module's source says about one reference."""

    module: str
    attr: str
    names: set[str] | None        # top-level names, None when the source cannot tell
    params: list[str] | None      # the factory's arguments after ``knobs``, None when unknown
    var_keyword: bool = False     # the factory takes ``**kwargs``


def _find_module(module: str) -> str | None:
    """The source path of ``module`` ("" if it has none), or None when it cannot be found.

    Finding a submodule imports its parent packages (their ``__init__``), as Python does.
    """
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):  # a parent package is missing or broken
        return None
    return None if spec is None else (spec.origin or "")


def read_factory(ref: str) -> FactorySource | None:
    """The source view of ``"module:attr"``, or None when its module cannot be found."""
    module, _, attr = ref.strip().partition(":")
    origin = _find_module(module)
    if origin is None:
        return None
    tree = _parse(origin)
    if tree is None:
        return FactorySource(module, attr, None, None)
    names, defs = _top_level(tree)
    params, var_kw = None, False
    node = defs.get(attr)
    if node is not None:
        args = node.args
        positional = [a.arg for a in (*args.posonlyargs, *args.args)]
        params = positional[1:] + [a.arg for a in args.kwonlyargs]
        var_kw = args.kwarg is not None
    return FactorySource(module, attr, names, params, var_kw)


def check_reference(ref: str, kwargs=None, *, what: str = "pipeline",
                    missing_ok: bool = False) -> FactorySource | None:
    """Raise :class:`PipelineError` for what the source proves wrong: a module that cannot
    be found (unless ``missing_ok``: then None), a factory it does not define (with a
    did-you-mean), a factory argument in ``kwargs`` that it does not take. Returns the
    source view, read once."""
    ref = ref.strip()
    module, _, attr = ref.partition(":")
    found = read_factory(ref)
    if found is None and missing_ok:
        return None
    if found is None:
        raise PipelineError(f"{what}={ref!r}: no module named {module!r} can be found; install "
                            "it, put its directory on PYTHONPATH, or fix the spelling")
    if found.names is not None and attr.split(".")[0] not in found.names:
        raise PipelineError(f"{what}={ref!r}: module {module!r} defines no {attr!r}"
                            f"{did_you_mean([attr], sorted(found.names))}")
    check_arguments(ref, found, kwargs)
    return found


def check_arguments(ref: str, found: FactorySource, kwargs) -> None:
    """Raise :class:`PipelineError` for a key of ``kwargs`` that the factory, as its source
    shows it, does not take (nothing when the source cannot tell, or it takes ``**kwargs``)."""
    if kwargs and found.params is not None and not found.var_keyword:
        unknown = sorted(set(kwargs) - set(found.params))
        if unknown:
            raise PipelineError(unknown_arguments(ref.strip(), unknown, found.params))


def unknown_arguments(name: str, unknown, takes) -> str:
    """The message for factory arguments that the factory does not take."""
    return (f"pipeline factory {name} takes no argument(s) {sorted(unknown)}"
            f"{did_you_mean(unknown, takes)}; its "
            f"arguments after knobs are {list(takes)}. Fix the name where you pass them "
            "(pipeline_kwargs, Pipeline.load(f, **kw) or build(**kw), intune-flow's "
            "--arg KEY=VALUE)")


def _parse(origin: str) -> ast.Module | None:
    if not origin.endswith(".py"):
        return None
    try:
        source = Path(origin).read_text()
        tree = ast.parse(source)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None
    return None if _DYNAMIC.search(source) else tree


def _top_level(tree: ast.Module) -> tuple[set[str], dict[str, ast.FunctionDef]]:
    """Names the module binds at top level (inside ``if``/``try`` blocks too), and its functions."""
    names: set[str] = set()
    defs: dict[str, ast.FunctionDef] = {}
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            if not isinstance(node, ast.ClassDef):
                defs.setdefault(node.name, node)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            bound = [node.target] if isinstance(node, ast.For) else [
                i.optional_vars for i in getattr(node, "items", []) if i.optional_vars]
            names.update(n.id for t in bound for n in ast.walk(t) if isinstance(n, ast.Name))
            for part in ("body", "orelse", "finalbody", "handlers"):
                todo.extend(getattr(node, part, []) or [])
        elif isinstance(node, ast.ExceptHandler):
            todo.extend(node.body)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.NamedExpr):
            names.add(node.value.target.id)
    # A name bound twice (a def, then an assignment or a second def) is not a known def.
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    defs.pop(t.id, None)
    return names, defs
