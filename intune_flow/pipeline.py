"""``Pipeline``: a user's dataset factory, its knob space, schema and fingerprint.

A factory is an ordinary function ``factory(knobs, **kwargs)`` returning a
``tf.data.Dataset`` or a ``torchdata.nodes`` node/Loader; it declares each knob where it
uses it. ``Pipeline.load`` accepts the factory, a ``"module:attr"`` string or another
``Pipeline``. :meth:`Pipeline.describe` discovers the knob space once by a dry build with a
recording ``Knobs()`` (building a tf.data graph or torchdata node graph reads no data) and
returns a frozen :class:`PipelineDescription`.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import sys
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from . import adapters
from .adapters.protocol import Adapter
from .adapters.torch_loader import searching_past_the_cores
from .bounded import Hung, call_bounded, run_bounded
from .errors import (FactoryError, KnobError, PipelineError, describe_error, did_you_mean,
                     near_misses)
from .knobs import AUTOTUNE, Knobs, KnobSpace
from .options import PIPELINE_FORM, malformed_reference

log = logging.getLogger(__name__)
_SAID_REJECTED: set = set()
"""(pipeline, knobs) whose refusal of AUTOTUNE was logged at info in this process: every
new load of a pipeline by name (the first ``build()`` of each ``TuneResult.from_dict``
result) finds them again, and says so at debug level (two threads discovering it at once
may both say it at info)."""


def _hint_for(exc: Exception) -> str:
    """What a factory's well-known framework error asks of a factory, where the error's own
    text does not say it in the factory's terms."""
    if "prefetch_factor option could only be specified in multiprocessing" in str(exc):
        # torch's DataLoader, at the knobs' defaults (1 worker: loading in this process).
        return (" (a DataLoader takes prefetch_factor only with worker processes: ask the knob "
                "on every build and pass it only then, prefetch_factor=pf if workers > 0 "
                "else None)")
    return ""


def _import_ref(ref: str) -> Callable:
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name.strip() or not attr.strip() or ":" in attr:
        raise malformed_reference(ref)
    module_name, attr = module_name.strip(), attr.strip()
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        cwd = os.getcwd()
        missing = getattr(exc, "name", None)
        # Like uvicorn/airflow: a module next to the caller should import without installing.
        if cwd not in sys.path and missing and module_name.startswith(missing.split(".")[0]):
            sys.path.insert(0, cwd)
            try:
                module = importlib.import_module(module_name)
            except ImportError:
                sys.path.remove(cwd)
                module = None
        else:
            module = None
        if module is None:
            raise PipelineError(
                f"cannot import module {module_name!r} of pipeline {ref!r}: "
                f"{type(exc).__name__}: {exc}. Check that the module is installed or on "
                f"sys.path (PYTHONPATH, or run from its parent directory) and spell it as "
                f"{PIPELINE_FORM}") from exc
    except Exception as exc:  # the module imported but raised at import time
        raise PipelineError(f"importing module {module_name!r} of pipeline {ref!r} raised "
                            f"{type(exc).__name__}: {exc}; fix the module") from exc
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            names = sorted(n for n in dir(module) if not n.startswith("_")
                           and callable(getattr(module, n)))
            if module_name == "__main__" and not did_you_mean([attr], names):
                # A factory of the script that ran (a Metaflow flow file): its reference
                # builds inside that script's steps only (README-only trial 80 built a flow's
                # result from a notebook and was shown the notebook's callables).
                raise PipelineError(
                    f"pipeline {ref!r} is a factory defined in the script that was run (its "
                    f"__main__, such as a flow file), not in this one; give it the factory "
                    f"again: result.bind(factory).build(), or define the factory in a module "
                    f"and pass {PIPELINE_FORM}") from None
            raise PipelineError(f"module {module_name!r} has no attribute {attr!r}"
                                f"{did_you_mean([attr], names)}; callables there: {names}"
                                f"{_origin(module)}") from None
    return obj


def _origin(module) -> str:
    """Where ``module`` came from, for a message: that a file of its name in the current
    directory was not it (a module named like the standard library's ``pipes`` or
    ``queue``: it shadows the user's), else the file it was imported from."""
    where = getattr(module, "__file__", None)
    top = module.__name__.split(".")[0]
    mine = [Path.cwd() / f"{top}.py", Path.cwd() / top / "__init__.py"]
    here = next((m for m in mine if m.exists()), None)
    if here is None or (where and Path(where).resolve() == here.resolve()):
        return f" (the module imported from {where or 'a built-in module'})"
    return (f". {module.__name__!r} was imported from {where or 'a built-in module'}, not "
            f"from {here}: your module is shadowed by one of the same name; rename it")


DISCOVERY_TIMEOUT_S = 60.0
"""Discovery runs the user's factory: one that does not return within this many seconds
(unless the caller gives its own ``timeout_s``) is abandoned and reported as hung."""


@dataclass(frozen=True)
class PipelineDescription:
    """What discovery tells about a pipeline, found once and then fixed.

    ``space``: the declared knobs plus the framework's implicit ones (``implicit`` names
    those); ``schema``: feature -> {"dtype", "shape"}, batch dimension as None;
    ``fingerprint``: the policy-cache key part for framework, schema and knob space;
    ``batched`` / ``batch_size``: whether an element is a batch, and its records when
    known; ``stages``: knob -> the framework's model nodes it drives, for per-stage signals
    ({} where the framework keeps none); ``records_stated``: the factory stated its
    records per element (``knobs.records_per_element``), so every element counts
    ``batch_size``; ``own_options``: options intune_flow would set that the factory sets
    itself (so no implicit knob sets them); ``pool_knob``: the knob that sizes the
    framework's shared thread pool (tf.data's private pool): the implicit ``threadpool``, or
    the factory's own knob that sets the option, or None; ``warnings``: what discovery found
    wrong with the factory's knobs (a declared knob that changes nothing in the built dataset);
    ``inert``: the names of those knobs, which tuning holds at their defaults
    (:attr:`search_space`).
    """

    framework: str
    space: KnobSpace
    implicit: tuple[str, ...]
    schema: dict
    fingerprint: str
    batched: bool
    batch_size: int | None
    stages: dict
    adapter: Adapter = field(repr=False, compare=False)
    records_stated: bool = False
    own_options: dict = field(default_factory=dict)
    pool_knob: str | None = None
    warnings: tuple[str, ...] = ()
    inert: tuple[str, ...] = ()

    @property
    def search_space(self) -> KnobSpace:
        """The space a search moves in: ``space`` with the inert knobs held at their
        defaults (measuring other values of them would read only noise)."""
        return self.space.held(self.inert) if self.inert else self.space


class Pipeline:
    """A dataset factory bound to its keyword arguments.

    :meth:`describe` runs discovery once (a dry build with a recording ``Knobs()``, the
    schema, the fingerprint, the stages), bounded by a timeout; ``space``, ``framework``,
    ``schema()``, ``fingerprint()`` and ``batch_size`` read that description.
    ``build(config)`` returns a fresh dataset each call.
    """

    def __init__(self, factory: Callable, kwargs: Mapping[str, Any] | None = None, *,
                 ref: str | None = None):
        if not callable(factory):
            raise PipelineError(f"a pipeline factory must be callable, got "
                                f"{type(factory).__name__}; pass a function f(knobs, **kwargs) "
                                f"or a {PIPELINE_FORM} string")
        self.factory = factory
        self.kwargs = dict(kwargs or {})
        self.ref = ref or _ref_of(factory)
        _check_kwargs(factory, self.kwargs, self.name)
        self._description: PipelineDescription | None = None
        self._discovered: PipelineDescription | None = None   # knobs and options only
        self._late: dict[str, str] = {}    # knob -> warning: declared only at some configs

    # -- construction ----------------------------------------------------------------
    @classmethod
    def load(cls, ref, **factory_kwargs) -> "Pipeline":
        """A Pipeline from a ``"module:attr"`` string, a factory callable or a Pipeline."""
        if isinstance(ref, Pipeline):
            if not factory_kwargs:
                return ref
            return cls(ref.factory, {**ref.kwargs, **factory_kwargs}, ref=ref.ref)
        if isinstance(ref, str):
            return cls(_import_ref(ref), factory_kwargs, ref=ref.strip())
        return cls(ref, factory_kwargs)

    def check_complete(self) -> None:
        """Raise :class:`FactoryError` unless the factory can be called with the knobs and the
        keyword arguments it is bound to (a required argument missing, no parameter for the
        knobs): every build would fail the same way, so there is nothing to fall back to."""
        _check_complete(self.factory, self.kwargs, self.name)

    @property
    def name(self) -> str:
        """The ``"module:function"`` reference, or for a factory that has none (defined in
        ``__main__`` or inside a function) its ``module:qualname`` for messages."""
        return self.ref or _qualname_of(self.factory) or repr(self.factory)

    def __repr__(self) -> str:
        kw = f", {self.kwargs}" if self.kwargs else ""
        return f"Pipeline({self.name!r}{kw})"

    # -- discovery -------------------------------------------------------------------
    def describe(self, timeout_s: float | None = None) -> PipelineDescription:
        """The pipeline's description, discovered on the first call within ``timeout_s``
        (default ``DISCOVERY_TIMEOUT_S``). A factory that raises raises here
        (:class:`PipelineError`, :class:`KnobError`); one that hangs raises
        :class:`~intune_flow.bounded.Hung`. Locating the stages never fails: a build that
        fails or hangs there only means no per-stage signals."""
        if self._description is None:
            limit = DISCOVERY_TIMEOUT_S if timeout_s is None else float(timeout_s)
            desc = self._knobs_described(limit)
            stages, _, hung = run_bounded(lambda: self._locate_stages(desc), limit)
            desc = replace(desc, stages={} if hung or stages is None else stages)
            desc = replace(desc, warnings=desc.warnings + self._split_interleaves(desc))
            inert, _, hung = run_bounded(lambda: self._inert_knobs(desc), limit)
            if inert and not hung:
                desc = replace(desc, warnings=desc.warnings + tuple(inert.values()),
                               inert=tuple(inert))
            python, _, hung = run_bounded(lambda: self._python_only_knobs(desc), limit)
            if python and not hung:
                desc = replace(desc, space=desc.space.without_autotune(python))
            self._description = desc
        return self._description

    def _knobs_described(self, limit: float = DISCOVERY_TIMEOUT_S) -> PipelineDescription:
        """The knob space, implicit knobs, options and schema from the factory's dry builds
        (:meth:`_discover`), made once: what building needs. :meth:`describe` adds the
        stages and the inert knobs, which only tuning reads."""
        if self._discovered is None:
            try:
                self._discovered = call_bounded(self._discover, limit, "knob discovery (the "
                                                                       "factory's dry build)")
            except Hung as exc:
                raise Hung(f"{exc}; the pipeline factory {self.name} hangs (check its inputs "
                           "and any blocking call in it)") from None
        return self._discovered

    def _call(self, knobs: Knobs):
        try:
            ds = self.factory(knobs, **self.kwargs)
        except KnobError as exc:
            raise KnobError(f"{exc} (in pipeline factory {self.name})") from exc
        except Exception as exc:
            raise PipelineError(
                f"pipeline factory {self.name} raised {type(exc).__name__}: "
                f"{str(exc).rstrip('. ')}{_hint_for(exc)}. Fix the factory or its arguments"
            ) from exc
        adapter = adapters.adapter_for(ds)
        if adapter is None:
            kind = f"{type(ds).__module__}.{type(ds).__qualname__}"
            missing = " (a missing return?)" if ds is None else ""
            raise FactoryError(
                f"pipeline factory {self.name} returned {kind}{missing}, which is not a "
                f"dataset; return a {adapters.SUPPORTED}")
        return ds, adapter

    def _discover(self) -> PipelineDescription:
        knobs = Knobs()
        ds, adapter = self._call(knobs)
        space = knobs.space
        implicit = []
        own = adapter.own_options(ds)
        offered = adapter.implicit_knobs(ds)
        pool_knob = self._own_pool_knob(adapter, own, knobs)
        if own:
            self._log_own_options(own, pool_knob, adapter, offered)
        if pool_knob is not None and space[pool_knob].kind != "threads":
            # It sizes a thread pool whatever the factory called it: the search treats it as
            # one (never handed to AUTOTUNE with the stages, grown when the pool saturates).
            space = KnobSpace(tuple(replace(k, kind="threads") if k.name == pool_knob else k
                                    for k in space))
        for knob in offered:
            if knob.name not in space:
                space = space.with_knob(knob)
                implicit.append(knob.name)
        if adapter.POOL_KNOB in implicit:
            pool_knob = adapter.POOL_KNOB
        stated = knobs.records
        spec = adapter.spec_schema(ds, None if stated is None else stated > 1)
        batch = adapter.batch_size(ds) if stated is None else stated
        del ds
        desc = PipelineDescription(framework=adapter.FRAMEWORK, space=space,
                                   implicit=tuple(implicit), schema={}, fingerprint="",
                                   batched=False, batch_size=batch, stages={}, adapter=adapter,
                                   records_stated=stated is not None, own_options=own,
                                   pool_knob=pool_knob)
        if not tuple(knobs.space) and adapter.FRAMEWORK == "tf.data":
            msg = (f"pipeline {self.name} declares no knobs of its own: only "
                   f"{', '.join(repr(n) for n in implicit) or 'no'} implicit knob(s) are tuned, "
                   "and every stage keeps the parallelism and buffers the factory wrote; "
                   "declare them with the knobs it takes first "
                   "(num_parallel_calls=knobs.parallelism(\"parse\"))")
            log.warning(msg)
            desc = replace(desc, warnings=desc.warnings + (msg,))
        if adapter.FRAMEWORK == "tf.data":   # torchdata replaces AUTOTUNE with values itself
            rejected = self._autotune_rejected(desc)
            if rejected:
                desc = replace(desc, space=space.without_autotune(rejected))
        if spec is None:   # torchdata: known only from the first batch
            said = (stated > 1) if stated is not None else (True if batch is not None else None)
            spec = adapters.element_schema(self._first_element(desc), said,
                                           adapter.LIST_IS_BATCH)
        schema, batched, static = spec
        if batch is None and (static is not None or not batched):
            batch = static if batched else 1
        if batch is None:
            batch = adapters.leading_dim(self._first_element(desc), adapter.LIST_IS_BATCH)
        from .fingerprint import fingerprint

        return replace(desc, schema=schema, batched=bool(batched), batch_size=batch,
                       fingerprint=fingerprint(adapter.FRAMEWORK, schema, desc.space))

    def _own_pool_knob(self, adapter, own: dict, knobs: Knobs) -> str | None:
        """The factory's own knob that sets the option sizing the framework's thread pool
        (``adapter.POOL_OPTION``), or None: its knobs (``threads`` knobs first) are built at
        another value, and the first one the option follows is it. Its busy share is then
        measured like the implicit ``threadpool``'s, so the search sizes the pool the stages
        run on (a pool left at 1 serializes every stage)."""
        if adapter.POOL_OPTION is None or adapter.POOL_OPTION not in own:
            return None
        values = knobs.config
        for knob in sorted(knobs.space, key=lambda k: k.kind != "threads"):
            if knob.kind == "buffer" or knob.min == knob.max:
                continue
            other = knob.max if values[knob.name] != knob.max else knob.min
            try:
                ds, _ = self._call(Knobs({**values, knob.name: other}))
            except (PipelineError, KnobError):
                continue
            if adapter.own_options(ds).get(adapter.POOL_OPTION) == other:
                return knob.name
        return None

    def _log_own_options(self, own: dict, pool_knob: str | None, adapter, offered) -> None:
        """One line per option the factory sets itself that an implicit knob would set."""
        left_out = [k.name for k in adapter.implicit_knobs() if k.name not in
                    {o.name for o in offered}]
        for option, value in own.items():
            by = (f"knob {pool_knob!r}" if pool_knob and option == adapter.POOL_OPTION
                  else f"value {value}")
            log.info("pipeline %s sets its own %s (%s); intune_flow adds no %s knob and leaves "
                     "the option as the factory sets it", self.name, option, by,
                     " or ".join(repr(n) for n in left_out) or "implicit")

    def _split_interleaves(self, desc: PipelineDescription) -> tuple[str, ...]:
        """A warning per tf.data interleave whose ``cycle_length`` and ``num_parallel_calls``
        two knobs drive (README-only trial 93 declared them so, and was told nothing)."""
        if desc.framework != "tf.data":
            return ()
        from .adapters.tfdata_stages import split_interleaves

        out = []
        for cycle, calls in split_interleaves(desc.stages):
            msg = (f"knobs {cycle!r} and {calls!r} of pipeline {self.name} set one interleave's "
                   f"cycle_length and num_parallel_calls: tf.data rejects num_parallel_calls "
                   f"above cycle_length, so each config with {calls!r} above {cycle!r} fails "
                   f"and costs the search a measurement; give both one knob (k = "
                   f"knobs.parallelism({cycle!r}); cycle_length=k, num_parallel_calls=k)")
            log.warning(msg)
            out.append(msg)
        return tuple(out)

    def _python_only_knobs(self, desc: PipelineDescription) -> list[str]:
        """tf.data knobs read only by Python code the graph calls (a generator's thread pool, a
        ``numpy_function``'s closure): built at their minimum and maximum, the graphs and
        options are the same and the Python functions differ. tf.data's AUTOTUNE cannot size
        them (a factory would pass -1 to, say, ``ThreadPoolExecutor``: README-only trial 94),
        so they take no AUTOTUNE: the AUTOTUNE baseline keeps them at their defaults and the
        search at set values."""
        if desc.framework != "tf.data":
            return []
        from .adapters.tfdata import graph_signature

        out = []
        for knob in desc.space:
            if (knob.name in desc.implicit or knob.name in desc.inert or not knob.autotune
                    or knob.min == knob.max or desc.stages.get(knob.name)):
                continue
            try:
                low, high = (self._build(desc, {knob.name: v}) for v in (knob.min, knob.max))
                graphs = graph_signature(low), graph_signature(high)
                if graphs[0] is not None and graphs[0] == graphs[1] and \
                        desc.adapter.build_signature(low) != desc.adapter.build_signature(high):
                    out.append(knob.name)
            except Exception:  # noqa: BLE001 - a failing build is reported by the search
                continue
        if out:
            log.info("pipeline %s: knob(s) %s reach only Python code the dataset calls, which "
                     "tf.data's AUTOTUNE cannot size: they take no AUTOTUNE (the AUTOTUNE "
                     "baseline keeps them at their defaults)", self.name, out)
        return out

    def _inert_knobs(self, desc: PipelineDescription) -> dict[str, str]:
        """Declared knobs that change nothing in the built dataset, each with its warning:
        built at their minimum and at their maximum, the two builds have the same signature
        (tf.data: graph, options and the Python functions it calls), both with the other
        knobs at their defaults and at their maxima (a DataLoader's prefetch factor matters
        only with workers). Knobs located in a stage are not built again; frameworks
        without signatures: {}."""
        out = {}
        highs = {k.name: k.max for k in desc.space}
        for knob in desc.space:
            if knob.name in desc.implicit or knob.min == knob.max or desc.stages.get(knob.name):
                continue    # a knob located in a stage reaches the dataset
            try:
                same = self._same_build(desc, {knob.name: knob.min}, {knob.name: knob.max})
                if same is None:
                    return out
                same = same and self._same_build(desc, {**highs, knob.name: knob.min},
                                                 {**highs, knob.name: knob.max})
            except Exception:  # noqa: BLE001 - a failing build is reported by the search
                continue
            if same:
                msg = (f"knob {knob.name!r} changes nothing in the built dataset (the same graph "
                       f"and options at {knob.min} and {knob.max}): pipeline {self.name} declares "
                       "it but does not pass its value to the dataset; tuning holds it at its "
                       f"default ({knob.default})")
                log.warning(msg)
                out[knob.name] = msg
        return out

    def _same_build(self, desc: PipelineDescription, a: dict, b: dict) -> bool | None:
        """Whether configs ``a`` and ``b`` build the same dataset (None: no signature)."""
        first = self._signature(desc, a)
        if first is None:
            return None
        return first == self._signature(desc, b)

    def _signature(self, desc: PipelineDescription, config) -> bytes | None:
        return desc.adapter.build_signature(self._build(desc, config))

    def signature(self, config: Mapping[str, int]) -> bytes | None:
        """What ``config`` builds, comparable between configs (the adapter's
        ``build_signature``); None where the framework has none or the build fails."""
        try:
            return self._signature(self.describe(), config)
        except Exception:  # noqa: BLE001 - the probe builds again and reports the error
            return None

    def _autotune_rejected(self, desc: PipelineDescription) -> list[str]:
        """Knobs whose op rejects AUTOTUNE when built (a shuffle buffer): one dry build with
        every knob at AUTOTUNE and, only if that fails, one per knob (the rest at defaults)."""
        errors = []

        def builds(config) -> bool:
            try:
                self._build(desc, config)
                return True
            except Exception as e:  # noqa: BLE001 - any build error marks the config as rejected
                errors.append(describe_error(e.__cause__ or e, limit=200))   # not our wrapper's
                return False

        space = desc.space
        if builds(space.autotune()):
            return []
        rejected = [k.name for k in space if not builds({k.name: AUTOTUNE})]
        if not rejected or not builds(space.without_autotune(rejected).autotune()):
            rejected = list(space.names)     # only a combination fails: use the defaults
        said = (self.name, tuple(rejected))
        again = said in _SAID_REJECTED
        _SAID_REJECTED.add(said)
        log.log(logging.DEBUG if again else logging.INFO,
                "pipeline %s: knob(s) %s do not accept AUTOTUNE (a dry build with them at "
                "AUTOTUNE failed: %s; that error, and the framework's own log of it, are "
                "expected); its AUTOTUNE baseline keeps them at their defaults",
                self.name, rejected, errors[0])
        return rejected

    def _locate_stages(self, desc: PipelineDescription) -> dict:
        """Knob -> model nodes, by tagging builds (tf.data); {} if a build fails."""
        try:
            return desc.adapter.locate_stages(
                desc.space, lambda config: desc.adapter.iterate(self._build(desc, config)))
        except Exception as e:  # noqa: BLE001 - no signals is a supported state
            log.info("pipeline %s: no per-stage signals, locating them failed: %s",
                     self.name, describe_error(e, limit=300))
            return {}

    @property
    def space(self) -> KnobSpace:
        """The knobs the factory declares, plus the framework's implicit ones."""
        return self.describe().space

    @property
    def framework(self) -> str:
        """``"tf.data"``, ``"torchdata"`` or ``"torch.utils.data"``."""
        return self.describe().framework

    @property
    def implicit_knobs(self) -> tuple[str, ...]:
        """Names of knobs intune_flow adds (tf.data: ``threadpool``), not declared by the factory."""
        return self.describe().implicit

    @property
    def stages(self) -> dict:
        """Knob -> the framework's model nodes it drives ({} where none are kept)."""
        return self.describe().stages

    @property
    def batch_size(self) -> int | None:
        """Records per element when inferable (the graph's batch op or the first element)."""
        return self.describe().batch_size

    def schema(self) -> dict:
        """Feature name -> {"dtype", "shape"} of one element, batch dimension as None."""
        return self.describe().schema

    def fingerprint(self) -> str:
        """Stable hash of framework, schema and knob space: the policy-cache key."""
        return self.describe().fingerprint

    # -- building --------------------------------------------------------------------
    def resolve(self, config: Mapping[str, int] | None = None, cpu_budget: float | None = None) -> dict:
        """The complete config the factory will see: validated, defaults filled in, and for
        torchdata (which has no AUTOTUNE) AUTOTUNE replaced by concrete values."""
        return self._resolve(self.describe(), config, cpu_budget)

    @staticmethod
    def _resolve(desc: PipelineDescription, config, cpu_budget) -> dict:
        config = desc.space.validate(config or {})
        if cpu_budget is None:
            from .resources import usable_cpus

            cpu_budget = usable_cpus()
        return desc.adapter.prepare_config(desc.space, config, cpu_budget)

    def build(self, config: Mapping[str, int] | None = None, *, cpu_budget: float | None = None):
        """A fresh dataset with ``config`` (missing knobs at their defaults). The first build
        of a Pipeline not yet described makes the knob discovery's dry builds (not the
        stage location or inert-knob builds tuning adds); later ones call the factory once."""
        desc = self._description or self._knobs_described()
        return self._build(desc, config, cpu_budget)

    def _build(self, desc: PipelineDescription, config, cpu_budget=None):
        # Discovery and the search build configs past the cores on purpose: torch's warning
        # about that is kept for iterating (the user's own loop still shows it).
        config = self._resolve(desc, config, cpu_budget)
        knobs = Knobs(config)
        with searching_past_the_cores():
            ds, adapter = self._call(knobs)
        self._note_late_knobs(desc, knobs, config)
        return adapter.finalize(ds, config, desc.implicit)

    def _note_late_knobs(self, desc: PipelineDescription, knobs: Knobs, config) -> None:
        """Warn once per knob the factory declared at ``config`` but not at its defaults,
        where the knob space is found: the search never moves it."""
        for name in knobs.space.names:
            if name not in desc.space.names and name not in self._late:
                self._late[name] = (
                    f"knob {name!r} is declared only at some configs (here at {dict(config)}), "
                    f"not at the defaults, where pipeline {self.name}'s knobs are found: it is "
                    "not tuned; ask every knob on every build, also where the config does not "
                    "use its value")
                log.warning(self._late[name])

    @property
    def late_knob_warnings(self) -> list[str]:
        """One warning per knob the factory declared only at some configs (never tuned)."""
        return list(self._late.values())

    def build_split(self, config: Mapping[str, int] | None, splitter, *,
                    cpu_budget: float | None = None):
        """A fresh dataset with ``config`` whose worker side (everything up to
        ``knobs.split(ds)``, or the whole dataset when the factory marks no split) went
        through ``splitter(worker_side) -> dataset`` (``distribute()`` onto tf.data service
        workers). What intune_flow sets besides the factory's knobs (the ``threadpool`` knob)
        is applied to the worker side, where the work runs, and again on the trainer side."""
        desc = self.describe()
        if desc.framework != "tf.data":
            raise PipelineError(f"workers= runs the pipeline on tf.data service workers; "
                                f"{self.name} is a {desc.framework} pipeline. Fix: tune it "
                                "without workers=, or write it with tf.data")
        config = self._resolve(desc, config, cpu_budget)
        knobs = Knobs(config)
        knobs._splitter = lambda worker: splitter(
            desc.adapter.finalize(worker, config, desc.implicit))
        ds, adapter = self._call(knobs)
        if not knobs._split_marked:
            return splitter(adapter.finalize(ds, config, desc.implicit))
        return adapter.finalize(ds, config, desc.implicit)

    def worker_side(self, config: Mapping[str, int] | None = None):
        """The part of the dataset that runs on tf.data service workers under ``workers=``."""
        seen = []

        def keep(worker):
            seen.append(worker)
            return worker
        self.build_split(config, keep)
        return seen[0]

    def iterate(self, ds):
        """An iterator over a new epoch of a dataset this pipeline built."""
        return self.describe().adapter.iterate(ds)

    def snapshot(self, iterator):
        """The framework's per-stage timings so far (None where it keeps none)."""
        return self.describe().adapter.snapshot(iterator)

    def stage_signals(self, before, after, seconds: float, config: Mapping[str, int]) -> dict:
        """Busy share (0..1) per knob between two snapshots ``seconds`` apart."""
        desc = self.describe()
        return desc.adapter.stage_signals(desc.stages, before, after, seconds, dict(config),
                                          desc.pool_knob)

    def records_rate(self, before, after, seconds: float) -> float | None:
        """Records/s under the output's batches between two snapshots (None: unknown)."""
        return self.describe().adapter.records_rate(before, after, seconds)

    def autotune_choices(self, snapshot, config: Mapping[str, int]) -> dict:
        """Knob -> the value the framework's AUTOTUNE held at ``snapshot``, for AUTOTUNE knobs."""
        desc = self.describe()
        return desc.adapter.autotune_choices(desc.stages, snapshot, dict(config))

    def first_element(self, config: Mapping[str, int] | None = None):
        """The first element of a fresh build; PipelineError if the dataset is empty."""
        return self._first_element(self.describe(), config)

    def _first_element(self, desc: PipelineDescription, config=None):
        ds = self._build(desc, config)
        it = desc.adapter.iterate(ds)
        try:
            return next(it)
        except StopIteration:
            raise PipelineError(
                f"pipeline {self.name} yielded no elements; check that its input files exist "
                "and are not empty and that no filter/take drops everything") from None
        except Exception as exc:
            raise PipelineError(f"pipeline {self.name} raised {type(exc).__name__} while "
                                f"producing its first element: {exc}") from exc
        finally:
            del it, ds

    def records_in(self, element) -> int:
        """Records in one element of this pipeline: what the factory stated
        (``knobs.records_per_element``), else its batch dimension, or 1 if unbatched."""
        desc = self.describe()
        if desc.records_stated:
            return int(desc.batch_size)
        return adapters.leading_dim(element, desc.adapter.LIST_IS_BATCH) if desc.batched else 1


def apply_config(ds, config: Mapping[str, int]):
    """A dataset your factory built with ``Knobs(config)``, with what intune_flow sets
    besides the factory's own knobs applied as ``result.build()`` applies it (tf.data: the
    implicit ``threadpool`` knob as the private thread-pool size, unless the dataset sets
    its own pool). Other frameworks: ``ds`` unchanged. So
    ``apply_config(factory(Knobs(result.config), **kw), result.config)`` is the pipeline
    ``result.build()`` returns."""
    adapter = adapters.adapter_for(ds)
    if adapter is None:
        raise PipelineError(f"apply_config needs a {adapters.SUPPORTED}, got "
                            f"{type(ds).__module__}.{type(ds).__qualname__}")
    offered = [k.name for k in adapter.implicit_knobs(ds)]
    withheld = [k.name for k in adapter.implicit_knobs() if k.name not in offered]
    meant_by = near_misses([n for n in config if n not in offered], offered + withheld,
                           cutoff=0.8)
    meant_by.update({n: n for n in config if n in withheld})
    own = adapter.own_options(ds)
    for name, meant in meant_by.items():
        if meant in withheld:
            if config[name] not in own.values():    # else a factory knob of that name set it
                held = ", ".join(f"{o} {v}" for o, v in own.items())
                warnings.warn(f"apply_config: config key {name!r} is not applied: the "
                              f"dataset sets its own {held}, which intune_flow never "
                              "overrides; the factory's own knob sizes it", stacklevel=2)
        elif meant not in config:
            warnings.warn(f"apply_config: config key {name!r} is not applied; did you mean "
                          f"{meant!r}? (intune_flow applies {meant!r} itself)", stacklevel=2)
    implicit = tuple(n for n in offered if n in config)
    return adapter.finalize(ds, dict(config), implicit)


def _check_kwargs(factory: Callable, kwargs: Mapping[str, Any], name: str) -> None:
    """A keyword the factory does not take fails at once: it would fail every build.

    A missing required argument is left to the build (it may come with ``build(**kw)``).
    """
    params = _parameters(factory)
    if params is None:
        return
    _check_knobs_slot(params, kwargs, name)
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    takes = [p.name for p in params[1:] if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    unknown = sorted(set(kwargs) - set(takes))
    if unknown:
        from .reference import unknown_arguments

        raise PipelineError(unknown_arguments(name, unknown, takes))


def _parameters(factory: Callable) -> list[inspect.Parameter] | None:
    """The factory's parameters; None for a builtin or an object without a signature."""
    try:
        return list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):
        return None


_NOT_KNOBS = (int, float, str, bytes, os.PathLike)
"""Defaults a knobs parameter cannot have: a first parameter defaulting to one of these is a
factory argument (``def f(batch_size=256)``) that the knobs would silently replace."""


def _check_knobs_slot(params: list, kwargs: Mapping[str, Any], name: str) -> None:
    """Raise :class:`FactoryError` when the factory's first parameter, where the knobs go,
    is one of its arguments: given in ``kwargs``, defaulting to a value knobs cannot be, or
    followed by a parameter named ``knobs`` (or annotated ``Knobs``)."""
    first = params[0] if params else None
    if first is None or first.kind not in (first.POSITIONAL_ONLY, first.POSITIONAL_OR_KEYWORD):
        return
    later = next((p for p in params[1:] if _names_knobs(p)), None)
    if later is not None and not _names_knobs(first):
        raise FactoryError(f"pipeline factory {name} takes {later.name!r} as parameter "
                           f"{params.index(later) + 1}, but intune_flow passes the knobs as "
                           f"the first argument (there it would land in {first.name!r}): "
                           f"move it first, def my_pipeline(knobs, {first.name}, ...)")
    if first.name in kwargs or isinstance(first.default, _NOT_KNOBS):
        given = "is given in pipeline_kwargs" if first.name in kwargs \
            else f"defaults to {first.default!r}"
        raise FactoryError(f"pipeline factory {name}'s first parameter {first.name!r} {given}, "
                           "but intune_flow passes the knobs there: a factory takes them first, "
                           f"def my_pipeline(knobs, {first.name}=..., ...), and declares its "
                           "knobs with them (knobs.parallelism('map', ...))")


def _names_knobs(param: inspect.Parameter) -> bool:
    """Whether ``param`` is meant for the knobs: named ``knobs`` or annotated ``Knobs``."""
    note = param.annotation
    return param.name == "knobs" or note is Knobs or (isinstance(note, str)
                                                      and note.rsplit(".", 1)[-1] == "Knobs")


def _check_complete(factory: Callable, kwargs: Mapping[str, Any], name: str) -> None:
    params = _parameters(factory)
    if params is None:
        return
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                  inspect.Parameter.VAR_POSITIONAL)
    if not params or params[0].kind not in positional:
        raise FactoryError(f"pipeline factory {name} takes no positional argument for the "
                            "knobs: a factory takes them first, def my_pipeline(knobs, ...), "
                            "and declares its knobs with them (knobs.parallelism('map', ...))")
    missing = [p.name for p in params[1:] if p.default is p.empty and p.name not in kwargs
               and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if missing:
        raise FactoryError(f"pipeline factory {name} needs argument(s) {missing} that were "
                            "not given: pass them in pipeline_kwargs (--arg name=value on the "
                            "command line), or give them defaults in the factory")


def _qualname_of(factory) -> str | None:
    """``"module:qualname"`` of a function or class, else None."""
    module, qual = getattr(factory, "__module__", None), getattr(factory, "__qualname__", None)
    return f"{module}:{qual}" if module and qual else None


def _ref_of(factory) -> str | None:
    """``"module:qualname"`` of a module-level function (usable to load it again), else None."""
    name = _qualname_of(factory)
    if name is None or "<" in name or name.startswith("__main__:"):
        return None
    return name
