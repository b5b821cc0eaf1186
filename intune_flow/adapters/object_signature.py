"""A comparable description of plain Python objects by value, for frameworks with no graph to
serialize (a torch DataLoader and the Dataset, sampler and collate function it holds).

Two builds whose descriptions are equal run the same pipeline only if the description saw
everything a knob could change. So it answers None (no signature: nothing is compared) as
soon as it meets something it cannot describe by value (a re-entrant lock, an open file, a
large array, an object nested too deep) instead of guessing. A plain lock is described by
whether it is held: it carries nothing else (tf.data's ``from_generator`` keeps one beside
the generator).
"""

from __future__ import annotations

import functools
import hashlib
import io
import threading
import types
from pathlib import PurePath

MAX_DEPTH = 16
MAX_ITEMS = 100_000
MAX_ARRAY_BYTES = 4 << 20

_SIMPLE = (type(None), bool, int, float, complex, str, bytes)
_LOCK = type(threading.Lock())


class _Opaque(Exception):
    """Met something not describable by value."""


def describe(obj) -> bytes | None:
    """``obj`` described by value (None when some part of it cannot be)."""
    try:
        return _describe(obj, 0, set()).encode()
    except (_Opaque, RecursionError):
        return None


def describe_attrs(obj, names) -> bytes | None:
    """The attributes ``names`` of ``obj`` described by value (None when one cannot be)."""
    return describe({n: getattr(obj, n, None) for n in names})


def _describe(obj, depth: int, path: set) -> str:
    if isinstance(obj, _SIMPLE):
        return repr(obj)
    if depth > MAX_DEPTH:
        raise _Opaque(type(obj).__name__)
    if id(obj) in path:
        return "<cycle>"
    path = path | {id(obj)}

    def sub(x):
        return _describe(x, depth + 1, path)

    name = f"{type(obj).__module__}.{type(obj).__qualname__}"
    if isinstance(obj, PurePath):
        return f"{name}({str(obj)!r})"
    if isinstance(obj, _LOCK):
        return f"{name}(held={obj.locked()})"
    if isinstance(obj, io.IOBase):     # its attributes do not say which file, nor where in it
        raise _Opaque(name)
    if isinstance(obj, (list, tuple, set, frozenset)):
        if len(obj) > MAX_ITEMS:
            raise _Opaque(name)
        items = [sub(x) for x in obj]
        return f"{name}[{','.join(sorted(items) if isinstance(obj, (set, frozenset)) else items)}]"
    if isinstance(obj, dict):
        if len(obj) > MAX_ITEMS:
            raise _Opaque(name)
        return f"{name}{{{','.join(sorted(f'{sub(k)}:{sub(v)}' for k, v in obj.items()))}}}"
    if isinstance(obj, functools.partial):
        return f"partial({sub(obj.func)},{sub(obj.args)},{sub(obj.keywords)})"
    if isinstance(obj, types.MethodType):
        return f"method({sub(obj.__self__)}.{obj.__func__.__qualname__})"
    if isinstance(obj, types.FunctionType):
        # A knob captured by a closure or a default argument is part of what the function does.
        # Two lambdas of one factory share a qualname: their code tells them apart.
        cells = tuple(c.cell_contents for c in obj.__closure__ or () if _filled(c))
        code = obj.__code__
        body = hashlib.sha256(code.co_code + repr(code.co_consts).encode()).hexdigest()[:16]
        return (f"function({obj.__module__}.{obj.__qualname__}:{code.co_firstlineno}:{body},"
                f"{sub(obj.__defaults__)},{sub(obj.__kwdefaults__)},{sub(cells)})")
    if isinstance(obj, (type, types.BuiltinFunctionType, types.ModuleType)):
        return f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', obj.__name__)}"
    array = _array_bytes(obj)
    if array is not None:
        return f"{name}{array}"
    state = _rng_state(obj)
    if state is not None:
        return f"{name}({sub(state)})"
    if hasattr(obj, "__dict__") and not isinstance(obj, type):
        slots = {s: getattr(obj, s) for s in getattr(type(obj), "__slots__", ()) if hasattr(obj, s)}
        return f"{name}({sub({**vars(obj), **slots})})"
    raise _Opaque(name)


def _filled(cell) -> bool:
    try:
        cell.cell_contents
        return True
    except ValueError:  # an empty cell: a name the function assigns later
        return False


def _array_bytes(obj) -> str | None:
    """numpy arrays and torch tensors: shape, dtype and a hash of the data (small ones only)."""
    to_numpy = getattr(obj, "numpy", None) if type(obj).__module__.startswith("torch") else None
    if to_numpy is not None:
        try:
            obj = obj.detach().cpu().numpy()
        except Exception:  # noqa: BLE001 - a tensor numpy cannot hold
            raise _Opaque(type(obj).__name__) from None
    if type(obj).__module__ != "numpy" or not hasattr(obj, "tobytes"):
        return None
    if getattr(obj, "nbytes", MAX_ARRAY_BYTES + 1) > MAX_ARRAY_BYTES:
        raise _Opaque("large array")
    digest = hashlib.sha256(obj.tobytes()).hexdigest()
    return f"({getattr(obj, 'shape', ())},{getattr(obj, 'dtype', '')},{digest})"


def _rng_state(obj):
    """A random generator's state (numpy, random.Random, torch), else None."""
    bit = getattr(obj, "bit_generator", None)
    if bit is not None:
        return bit.state
    if type(obj).__module__ == "random" and hasattr(obj, "getstate"):
        return obj.getstate()
    if type(obj).__module__.startswith("torch") and type(obj).__name__ == "Generator":
        return obj.get_state().numpy().tobytes()
    return None
