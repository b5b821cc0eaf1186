"""``Pipeline``: a user's dataset factory, its knob space, schema and fingerprint.

A factory is an ordinary function ``factory(knobs, **kwargs)`` returning a
``tf.data.Dataset`` or a ``torchdata.nodes`` node/Loader; it declares each knob where it
uses it. ``Pipeline.load`` accepts the factory, a ``"module:attr"`` string or another
``Pipeline``. The knob space is discovered once by a dry build with a recording
``Knobs()`` (building a tf.data graph or torchdata node graph reads no data).
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import sys
from typing import Any, Callable, Mapping

from . import adapters
from .errors import KnobError, PipelineError, describe_error
from .knobs import AUTOTUNE, Knobs, KnobSpace

log = logging.getLogger(__name__)

_FORM = '"package.module:function" (e.g. "examples.criteo:criteo_pipeline")'


def _import_ref(ref: str) -> Callable:
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name.strip() or not attr.strip() or ":" in attr:
        raise PipelineError(f"pipeline reference {ref!r} is malformed; write it as {_FORM}")
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
                f"{_FORM}") from exc
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
            raise PipelineError(f"module {module_name!r} has no attribute {attr!r}; "
                                f"callables there: {names}") from None
    return obj


class Pipeline:
    """A dataset factory bound to its keyword arguments.

    ``space`` (the knobs), ``framework``, ``schema()``, ``fingerprint()`` and
    ``batch_size`` are computed on first use and cached; ``build(config)`` returns a
    fresh dataset each call.
    """

    def __init__(self, factory: Callable, kwargs: Mapping[str, Any] | None = None, *,
                 ref: str | None = None):
        if not callable(factory):
            raise PipelineError(f"a pipeline factory must be callable, got "
                                f"{type(factory).__name__}; pass a function f(knobs, **kwargs) "
                                f"or a {_FORM} string")
        self.factory = factory
        self.kwargs = dict(kwargs or {})
        self.ref = ref or _ref_of(factory)
        _check_kwargs(factory, self.kwargs, self.name)
        self._space: KnobSpace | None = None
        self._adapter = None
        self._implicit: tuple[str, ...] = ()
        self._spec: tuple[dict, bool, int | None] | None = None
        self._schema: dict | None = None
        self._batch_size: int | None = None
        self._batch_known = False
        self._batched: bool | None = None
        self._stages: dict | None = None

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

    @property
    def name(self) -> str:
        """The ``"module:function"`` reference, or for a factory that has none (defined in
        ``__main__`` or inside a function) its ``module:qualname`` for messages."""
        return self.ref or _qualname_of(self.factory) or repr(self.factory)

    def __repr__(self) -> str:
        kw = f", {self.kwargs}" if self.kwargs else ""
        return f"Pipeline({self.name!r}{kw})"

    # -- discovery -------------------------------------------------------------------
    def _call(self, knobs: Knobs):
        try:
            ds = self.factory(knobs, **self.kwargs)
        except KnobError as exc:
            raise KnobError(f"{exc} (in pipeline factory {self.name})") from exc
        except Exception as exc:
            raise PipelineError(
                f"pipeline factory {self.name} raised {type(exc).__name__}: {exc}. "
                "Fix the factory or its arguments") from exc
        adapter = adapters.adapter_for(ds)
        if adapter is None:
            kind = f"{type(ds).__module__}.{type(ds).__qualname__}"
            raise PipelineError(
                f"pipeline factory {self.name} returned {kind}, which is not a dataset; "
                f"return a {adapters.SUPPORTED}")
        return ds, adapter

    def _discover(self) -> None:
        knobs = Knobs()
        ds, adapter = self._call(knobs)
        space = knobs.space
        implicit = []
        for knob in adapter.implicit_knobs():
            if knob.name not in space:
                space = space.with_knob(knob)
                implicit.append(knob.name)
        self._adapter, self._implicit = adapter, tuple(implicit)
        self._spec = adapter.spec_schema(ds)
        self._batch_size = adapter.batch_size(ds)
        self._batch_known = self._batch_size is not None
        self._space = space
        if adapter.FRAMEWORK == "tf.data":   # torchdata replaces AUTOTUNE with values itself
            rejected = self._autotune_rejected()
            if rejected:
                self._space = space.without_autotune(rejected)

    def _autotune_rejected(self) -> list[str]:
        """Knobs whose op rejects AUTOTUNE when built (a shuffle buffer): one dry build with
        every knob at AUTOTUNE and, only if that fails, one per knob (the rest at defaults)."""
        def builds(config) -> bool:
            try:
                self.build(config)
                return True
            except Exception:  # noqa: BLE001 - any build error marks the config as rejected
                return False

        space = self._space
        if builds(space.autotune()):
            return []
        rejected = [k.name for k in space if not builds({k.name: AUTOTUNE})]
        if not rejected or not builds(space.without_autotune(rejected).autotune()):
            rejected = list(space.names)     # only a combination fails: use the defaults
        log.info("pipeline %s: knob(s) %s do not accept AUTOTUNE; its AUTOTUNE baseline keeps "
                 "them at their defaults", self.name, rejected)
        return rejected

    @property
    def space(self) -> KnobSpace:
        """The knobs the factory declares, plus the framework's implicit ones."""
        if self._space is None:
            self._discover()
        return self._space

    @property
    def framework(self) -> str:
        """``"tf.data"``, ``"torchdata"`` or ``"torch.utils.data"``."""
        self.space
        return self._adapter.FRAMEWORK

    @property
    def implicit_knobs(self) -> tuple[str, ...]:
        """Names of knobs intune_flow adds (tf.data: ``threadpool``), not declared by the factory."""
        self.space
        return self._implicit

    @property
    def stages(self) -> dict:
        """Knob -> the framework's model nodes it drives, for per-stage signals; located once
        by two tagging builds (tf.data), {} where the framework keeps no per-stage timings
        or a build fails (signals are a help, never a requirement)."""
        if self._stages is None:
            self.space
            self._stages = {}  # what a caller sees while (or if) a tagging build hangs
            try:
                self._stages = self._adapter.locate_stages(
                    self.space, lambda config: self.iterate(self.build(config)))
            except Exception as e:  # noqa: BLE001 - no signals is a supported state
                log.info("pipeline %s: no per-stage signals, locating them failed: %s",
                         self.name, describe_error(e, limit=300))
        return self._stages

    # -- building --------------------------------------------------------------------
    def resolve(self, config: Mapping[str, int] | None = None, cpu_budget: float | None = None) -> dict:
        """The complete config the factory will see: validated, defaults filled in, and for
        torchdata (which has no AUTOTUNE) AUTOTUNE replaced by concrete values."""
        config = self.space.validate(config or {})
        if cpu_budget is None:
            from .resources import usable_cpus

            cpu_budget = usable_cpus()
        return self._adapter.prepare_config(self.space, config, cpu_budget)

    def build(self, config: Mapping[str, int] | None = None, *, cpu_budget: float | None = None):
        """A fresh dataset with ``config`` (missing knobs at their defaults)."""
        config = self.resolve(config, cpu_budget)
        ds, adapter = self._call(Knobs(config))
        return adapter.finalize(ds, config, self._implicit)

    def iterate(self, ds):
        """An iterator over a new epoch of a dataset this pipeline built."""
        return self._adapter.iterate(ds)

    def snapshot(self, iterator):
        """The framework's per-stage timings so far (None where it keeps none)."""
        return self._adapter.snapshot(iterator)

    def stage_signals(self, before, after, seconds: float, config: Mapping[str, int]) -> dict:
        """Busy share (0..1) per knob between two snapshots ``seconds`` apart."""
        return self._adapter.stage_signals(self.stages, before, after, seconds, dict(config),
                                           self._implicit)

    def autotune_choices(self, snapshot, config: Mapping[str, int]) -> dict:
        """Knob -> the value the framework's AUTOTUNE held at ``snapshot``, for AUTOTUNE knobs."""
        return self._adapter.autotune_choices(self.stages, snapshot, dict(config))

    def first_element(self, config: Mapping[str, int] | None = None):
        """The first element of a fresh build; PipelineError if the dataset is empty."""
        ds = self.build(config)
        it = self.iterate(ds)
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

    # -- identity --------------------------------------------------------------------
    def schema(self) -> dict:
        """Feature name -> {"dtype", "shape"} of one element, batch dimension as None."""
        if self._schema is None:
            self.space
            if self._spec is None:  # torchdata: known only from the first batch
                self._spec = adapters.element_schema(self.first_element(),
                                                     True if self._batch_known else None,
                                                     self._adapter.LIST_IS_BATCH)
            self._schema, batched, static = self._spec
            if not self._batch_known and (static is not None or not batched):
                self._batch_size, self._batch_known = (static if batched else 1), True
        return self._schema

    def fingerprint(self) -> str:
        """Stable hash of framework, schema and knob space: the policy-cache key."""
        from .fingerprint import fingerprint

        return fingerprint(self.framework, self.schema(), self.space)

    def records_in(self, element) -> int:
        """Records in one element of this pipeline: its batch dimension, or 1 if unbatched."""
        if self._batched is None:
            self.space
            if self._spec is not None:
                self._batched = self._spec[1]
            else:
                self._batched = self._batch_known or adapters.element_schema(
                    element, list_is_batch=self._adapter.LIST_IS_BATCH)[1]
        return adapters.leading_dim(element, self._adapter.LIST_IS_BATCH) if self._batched else 1

    @property
    def batch_size(self) -> int | None:
        """Records per element when inferable (the graph's batch op or the first element)."""
        if not self._batch_known:
            self.schema()
        if not self._batch_known:
            self._batch_size = adapters.leading_dim(self.first_element(),
                                                    self._adapter.LIST_IS_BATCH)
            self._batch_known = True
        return self._batch_size


def _check_kwargs(factory: Callable, kwargs: Mapping[str, Any], name: str) -> None:
    """A keyword the factory does not take fails at once: it would fail every build.

    A missing required argument is left to the build (it may come with ``build(**kw)``).
    """
    try:
        params = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):   # a builtin or an object without a signature
        return
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    takes = [p.name for p in params[1:] if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    unknown = sorted(set(kwargs) - set(takes))
    if unknown:
        from .reference import unknown_arguments

        raise PipelineError(unknown_arguments(name, unknown, takes))


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
