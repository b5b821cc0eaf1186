"""Knobs: the tunable parameters a pipeline factory declares where it uses them.

A factory receives a :class:`Knobs` object and asks it for values::

    def pipeline(knobs, files):
        ds = tf.data.Dataset.from_tensor_slices(files)
        ds = ds.interleave(tf.data.TFRecordDataset,
                           cycle_length=knobs.parallelism("read", max=32),
                           num_parallel_calls=knobs.parallelism("read"))
        ...

Building the factory once with a recording :class:`Knobs` discovers the
:class:`KnobSpace`; building it with a config returns the config's values.
A config is a plain ``dict[str, int]``; the value :data:`AUTOTUNE` (-1, the
same as ``tf.data.AUTOTUNE``) hands the knob to the framework's own tuner.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping

from .errors import KnobError, did_you_mean, near_misses

AUTOTUNE = -1
"""Config value meaning "let the framework decide" (equals ``tf.data.AUTOTUNE``)."""

KINDS = ("parallelism", "buffer", "threads")
THREAD_KINDS = ("parallelism", "threads")
"""Kinds whose value is a number of threads or concurrent calls (what scaling moves)."""
DEFAULT_MAX = {"parallelism": 64, "buffer": 64, "threads": 256}

# Values the tuner steps through: roughly geometric (powers of two and the values halfway between),
# so one step is a sensible move on 2 cores and on 128 alike, and for a shuffle buffer of
# thousands (a grid that ended at 1,024 gave a 1,024-16,384 buffer no value between).
_GRID = tuple(sorted({1, *(1 << e for e in range(1, 31)), *(3 << e for e in range(30))}))

Config = dict[str, int]


@dataclass(frozen=True)
class Knob:
    """One tunable integer: a stage's parallelism, a buffer size or a thread-pool size."""

    name: str
    kind: str
    min: int
    max: int
    default: int
    # False when the op the knob feeds rejects AUTOTUNE (a shuffle buffer): found by the
    # pipeline at discovery; not part of the knob's identity or its fingerprint.
    autotune: bool = field(default=True, compare=False)

    def grid(self) -> tuple[int, ...]:
        """The values one tuning step moves between, ``min`` and ``max`` included."""
        inner = [v for v in _GRID if self.min < v < self.max]
        return tuple(sorted({self.min, *inner, self.max}))

    def step(self, value: int, direction: int) -> int:
        """The grid value ``direction`` (+1/-1) steps from ``value``, clamped to the bounds."""
        grid = self.grid()
        if direction > 0:
            return next((v for v in grid if v > value), self.max)
        return next((v for v in reversed(grid) if v < value), self.min)

    def clamp(self, value: int) -> int:
        return max(self.min, min(self.max, int(value)))

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "min": self.min, "max": self.max,
                "default": self.default}


@dataclass(frozen=True)
class KnobSpace:
    """The knobs a factory declared, in declaration order."""

    knobs: tuple[Knob, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.knobs)

    def __len__(self) -> int:
        return len(self.knobs)

    def __iter__(self):
        return iter(self.knobs)

    def __contains__(self, name: str) -> bool:
        return name in self.names

    def __getitem__(self, name: str) -> Knob:
        for knob in self.knobs:
            if knob.name == name:
                return knob
        raise KnobError(f"unknown knob {name!r}; this pipeline declares {list(self.names)}")

    def with_knob(self, knob: Knob) -> "KnobSpace":
        return KnobSpace(self.knobs + (knob,))

    # -- configs -----------------------------------------------------------------
    def defaults(self) -> Config:
        return {k.name: k.default for k in self.knobs}

    def ones(self) -> Config:
        """Every knob at its minimum (1 unless the factory said otherwise): the naive baseline."""
        return {k.name: k.min for k in self.knobs}

    def autotune(self) -> Config:
        """Every knob handed to the framework's own tuner (tf.data AUTOTUNE); a knob whose op
        rejects AUTOTUNE (e.g. a shuffle buffer) stays at its default."""
        return {k.name: AUTOTUNE if k.autotune else k.default for k in self.knobs}

    def without_autotune(self, names: Iterable[str]) -> "KnobSpace":
        """The same space with the named knobs marked as not accepting AUTOTUNE."""
        names = set(names)
        return KnobSpace(tuple(replace(k, autotune=False) if k.name in names else k
                               for k in self.knobs))

    def held(self, names: Iterable[str]) -> "KnobSpace":
        """The same space with the named knobs held at their default: bounds of that one value,
        no AUTOTUNE, so no move, jump or baseline of a search changes them."""
        names = set(names)
        return KnobSpace(tuple(replace(k, min=k.default, max=k.default, autotune=False)
                               if k.name in names else k for k in self.knobs))

    def fit(self, config: Mapping[str, int]) -> Config:
        """``config`` with the knobs this space holds at one value (``min == max``) at it."""
        return {**config, **{k.name: k.min for k in self.knobs
                             if k.min == k.max and k.name in config}}

    def validate(self, config: Mapping[str, int], *, partial: bool = False) -> Config:
        """Check a config against the space; return a complete copy (missing knobs at default).

        Raises :class:`KnobError` naming the offending knob and the allowed range.
        """
        if not isinstance(config, Mapping):
            raise KnobError(f"a config is a dict of knob name to int, got {type(config).__name__}")
        unknown = [n for n in config if n not in self.names]
        if unknown:
            raise KnobError(
                f"config names unknown knob(s) {unknown}; this pipeline declares "
                f"{list(self.names)}. Fix the name or declare the knob in the factory.")
        out = self.defaults()
        for name, value in config.items():
            knob = self[name]
            if isinstance(value, bool) or not isinstance(value, int):
                try:
                    if isinstance(value, bool) or int(value) != float(value):
                        raise ValueError
                    value = int(value)
                except (TypeError, ValueError):
                    raise KnobError(f"knob {name!r} needs an integer, got {value!r}") from None
            if value != AUTOTUNE and not knob.min <= value <= knob.max:
                raise KnobError(
                    f"knob {name!r}={value} is outside its bounds [{knob.min}, {knob.max}]; "
                    f"use a value in range or AUTOTUNE (-1)")
            out[name] = int(value)
        if partial:
            return {n: out[n] for n in config}
        return out

    def concretize(self, config: Mapping[str, int], cpu_budget: float) -> Config:
        """Replace AUTOTUNE values by the concrete value the framework would start from."""
        cores = max(1, int(round(cpu_budget)))
        out = {}
        for knob in self.knobs:
            value = config.get(knob.name, knob.default)
            if value == AUTOTUNE:
                value = {"parallelism": cores, "threads": cores, "buffer": 2}[knob.kind]
            out[knob.name] = knob.clamp(value)
        return out

    # -- identity ------------------------------------------------------------------
    def to_json(self) -> list[dict]:
        return [k.to_dict() for k in self.knobs]

    @classmethod
    def from_json(cls, data: Iterable[Mapping]) -> "KnobSpace":
        try:
            return cls(tuple(Knob(name=str(d["name"]), kind=str(d["kind"]), min=int(d["min"]),
                                  max=int(d["max"]), default=int(d["default"])) for d in data))
        except (KeyError, TypeError, ValueError) as exc:
            raise KnobError(f"malformed knob space: {exc}") from None

    def fingerprint(self) -> str:
        """Hash of names, kinds and bounds (not defaults: changing a default keeps cached configs valid)."""
        ident = [[k.name, k.kind, k.min, k.max] for k in self.knobs]
        return hashlib.sha256(json.dumps(ident).encode()).hexdigest()[:16]


def _check_bound(name: str, what: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise KnobError(f"knob {name!r}: {what} must be an integer, got {value!r}")
    return value


class Knobs:
    """Handed to a pipeline factory: declare a knob and get its value in one call.

    ``Knobs()`` records declarations (discovery) and returns defaults;
    ``Knobs(config)`` returns the config's values. A knob declared twice must use
    the same bounds; a repeat may omit them (``knobs.parallelism("read")``).
    """

    def __init__(self, config: Mapping[str, int] | None = None):
        self._config = dict(config or {})
        self._declared: dict[str, Knob] = {}
        self._records: int | None = None
        self._splitter = None       # set by a scale-out build: worker side -> distributed
        self._split_marked = False

    @property
    def space(self) -> KnobSpace:
        """The knobs declared so far."""
        return KnobSpace(tuple(self._declared.values()))

    @property
    def config(self) -> Config:
        """The values handed out so far, by knob name."""
        return {n: self._config.get(n, k.default) for n, k in self._declared.items()}

    @property
    def records(self) -> int | None:
        """Records per element as the factory stated them (:meth:`records_per_element`)."""
        return self._records

    def records_per_element(self, n: int) -> int:
        """State how many records (rows) one element of the pipeline holds, where intune_flow
        would guess wrong: an element that is a block of ``n`` rows with no ``batch()`` in
        the graph, or (``n=1``) one record whose leaves happen to share a leading dimension.
        Not a knob: returns ``n`` unchanged, whatever the config."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise KnobError(f"records_per_element needs a positive integer, got {n!r}")
        if self._records is not None and self._records != n:
            raise KnobError(f"records_per_element is stated twice ({self._records} and {n}); "
                            "state it once")
        self._records = n
        return n

    def split(self, dataset):
        """Mark where the pipeline splits under ``workers=`` (tf.data): everything the factory
        built up to ``dataset`` runs on the tf.data service workers, what it applies to the
        returned dataset runs on the trainer (a ``py_function`` stage, a small prefetch).
        Without ``workers=`` (and during discovery) ``dataset`` comes back unchanged. A
        factory that never calls it runs whole on the workers (``distribute()`` at the end).
        Not a knob; call it once."""
        if self._split_marked:
            raise KnobError("knobs.split() is called twice; mark one split point")
        self._split_marked = True
        return self._splitter(dataset) if self._splitter is not None else dataset

    def parallelism(self, name: str, *extra, min: int | None = None, max: int | None = None,
                    default: int | None = None, **unknown) -> int:
        """Number of parallel calls/workers of a stage (tf.data ``num_parallel_calls``, ``cycle_length``, torchdata workers)."""
        _refuse_extra("parallelism", name, extra, unknown)
        return self._declare(name, "parallelism", min, max, default)

    def buffer(self, name: str, *extra, min: int | None = None, max: int | None = None,
               default: int | None = None, **unknown) -> int:
        """Number of elements a buffer holds (prefetch, shuffle-free queues)."""
        _refuse_extra("buffer", name, extra, unknown)
        return self._declare(name, "buffer", min, max, default)

    def threads(self, name: str, *extra, min: int | None = None, max: int | None = None,
                default: int | None = None, **unknown) -> int:
        """Size of a thread pool (e.g. tf.data's private thread pool)."""
        _refuse_extra("threads", name, extra, unknown)
        return self._declare(name, "threads", min, max, default)

    def __getattr__(self, attr: str):
        # Reached only for a name Knobs lacks: in a factory, a misspelt method, which must
        # not pass as a failing factory (a fallback) but say what was meant.
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise KnobNameError(f"knobs.{attr} does not exist{did_you_mean([attr], PUBLIC)}; "
                            f"a factory declares knobs with knobs.parallelism, knobs.buffer "
                            f"or knobs.threads (name, min=, max=, default=)")

    def _declare(self, name, kind, lo, hi, default) -> int:
        if not isinstance(name, str) or not name:
            raise KnobError(f"a knob name must be a non-empty string, got {name!r}")
        known = self._declared.get(name)
        if known is not None:
            if known.kind != kind:
                raise KnobError(f"knob {name!r} is declared as {known.kind} and as {kind}; "
                                "give the two knobs different names")
            for what, given, have in (("min", lo, known.min), ("max", hi, known.max),
                                      ("default", default, known.default)):
                if given is not None and given != have:
                    raise KnobError(
                        f"knob {name!r} is declared twice with different {what} ({have} and "
                        f"{given}); declare the bounds once and repeat just the name")
            return self._value(known)
        lo = 1 if lo is None else _check_bound(name, "min", lo)
        hi = DEFAULT_MAX[kind] if hi is None else _check_bound(name, "max", hi)
        if lo < 1:
            raise KnobError(f"knob {name!r}: min must be at least 1, got {lo}")
        if lo > hi:
            raise KnobError(f"knob {name!r}: min ({lo}) is greater than max ({hi}); swap them")
        if default is None:
            default = lo
        default = _check_bound(name, "default", default)
        if default != AUTOTUNE and not lo <= default <= hi:
            raise KnobError(f"knob {name!r}: default {default} is outside [{lo}, {hi}]; "
                            "change the default or widen the bounds")
        knob = Knob(name=name, kind=kind, min=lo, max=hi, default=default)
        self._declared[name] = knob
        if self._config and name not in self._config:
            self._warn_near_miss(knob)
        return self._value(knob)

    def _warn_near_miss(self, knob: Knob) -> None:
        """A config (built by hand) that misses ``knob`` but holds a name close to it: a
        misspelling, which would otherwise give the knob its default without a word."""
        unasked = [n for n in self._config if n not in self._declared]
        for meant in near_misses([knob.name], unasked).values():
            if near_misses([meant], self._declared).get(meant) != knob.name:
                continue    # closer to a knob declared before: that one was warned about
            warnings.warn(f"knob {knob.name!r} is not in the config, which has {meant!r}: a "
                          f"misspelling? {knob.name!r} gets its default ({knob.default})",
                          stacklevel=4)

    def _value(self, knob: Knob) -> int:
        value = self._config.get(knob.name, knob.default)
        if value != AUTOTUNE and not knob.min <= value <= knob.max:
            raise KnobError(f"knob {knob.name!r}={value} is outside [{knob.min}, {knob.max}]")
        return value


PUBLIC = tuple(name for name in vars(Knobs) if not name.startswith("_"))
"""What a factory may ask ``knobs`` for (a misspelling is matched against these)."""
_BOUNDS = ("min", "max", "default")


class KnobNameError(KnobError, AttributeError):
    """A factory asked ``knobs`` for something it does not have (``hasattr`` still works)."""


def _refuse_extra(kind: str, name, extra: tuple, unknown: dict) -> None:
    """Raise :class:`KnobError` for arguments a knob declaration does not take, naming the
    ones meant: bounds are keyword arguments ``min``, ``max`` and ``default``."""
    if unknown:
        raise KnobError(f"knobs.{kind}({name!r}, ...) got {sorted(unknown)}"
                        f"{did_you_mean(sorted(unknown), _BOUNDS)}; it takes min=, max= and "
                        "default=")
    if extra:
        raise KnobError(f"knobs.{kind}({name!r}, {', '.join(map(repr, extra))}): bounds are "
                        f"keyword arguments; write knobs.{kind}({name!r}, max=...) (also "
                        "min=, default=)")


FLAT_AT_MAX = 0.02
"""A knob at its max whose lower value read within this share of the config is not named by
:func:`at_their_max`: the measurements say the bound did not hold the search."""


def flat_below_max(space, config: dict, looks) -> list[str]:
    """The thread knobs ``config`` holds at their max where ``looks`` (``{"config",
    "throughput"}`` dicts: a cache record's best few, or a search's) hold ``config`` with
    that knob lower, every other knob the same, reading within :data:`FLAT_AT_MAX` of
    ``config``'s best look: the bound did not stop the search (README-only trial 74: a parse
    at its max of 8 read 4,230 records/s, at 6 4,216-4,229, the GETs before it the limit)."""
    looks = list(_looks(looks))
    ref = max((t for c, t in looks if c == config), default=0.0)
    if ref <= 0:
        return []
    flat = []
    for k in space:
        if k.kind not in THREAD_KINDS or config.get(k.name) != k.max:
            continue
        if any(0 < c.get(k.name, 0) < k.max and t >= ref * (1 - FLAT_AT_MAX)
               and all(c.get(n) == v for n, v in config.items() if n != k.name)
               for c, t in looks):
            flat.append(k.name)
    return flat


def _looks(looks):
    """(config, throughput) of each well-formed look; a damaged record's others are skipped."""
    for look in looks or ():
        try:
            yield dict(look["config"]), float(look["throughput"])
        except (KeyError, TypeError, ValueError):
            continue


def at_their_max(space, config: dict, implicit=(), contended: bool = False,
                 idle=(), one_core: float | None = None) -> list[str]:
    """A warning per declared thread knob the search left at its ``max``: the bound, not the
    pipeline, may have stopped it (an I/O-bound read can use hundreds of calls). For configs
    that left the CPU room: on a busy CPU more calls only take turns. ``contended``: other
    processes kept the CPU busy (this one did not), so the warning says the CPU may be what
    held the search: calls that wait would still use more, calls that compute would not.
    ``idle``: knobs whose calls something else held (16 map calls on a pool of 3 threads,
    read as not all busy), which more calls would not help. ``one_core``: the cores the
    process had, where its threads used about one of them (a pipeline whose calls run
    Python in threads can use no more: the GIL, not the bound, may be what held it)."""
    # One parenthesis, one clause per kind of call: README-only trial 93 read two in a row
    # ("the CPU may be what held it", "the GIL may be what held it") as contradicting.
    doubts = []
    if contended:
        doubts.append("if its calls compute rather than wait, other processes kept the CPU busy "
                      "while it was measured, so the CPU, not the bound, may be what held it")
    if one_core:
        doubts.append(f"if its calls run Python in threads, such as a torchdata "
                      f"method=\"thread\" mapper or a tf.py_function, this process used about "
                      f"one core of {one_core:g}, all the GIL lets them use: the GIL, not the "
                      f"bound, may be what held it, and more calls would not run in parallel")
    doubt = f" ({'; '.join(doubts)})" if doubts else ""
    return [f"knob {k.name!r} was tuned to its max ({k.max}): the best may lie above it; if "
            f"the pipeline can use more, raise the bound in the factory "
            f"(knobs.{k.kind}({k.name!r}, max=...)) and tune again{doubt}"
            for k in space if k.kind in THREAD_KINDS and k.name not in implicit
            and k.name not in idle and k.max > k.min and config.get(k.name) == k.max]
