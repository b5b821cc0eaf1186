"""``TuneOptions``: every tuning argument, parsed, coerced and validated in one place.

Every surface builds one: :func:`intune_flow.tune`, :func:`intune_flow.probe` (its budgets
and window), ``@intune`` (Metaflow), ``InTuneOperator`` / ``intune_task`` / ``@task.intune``
(Airflow) and ``intune-flow tune``. Values may arrive as Python values or as strings (the
CLI, Jinja-rendered templates, ``--with intune:budget_s=30``, remote Metaflow runs): they
are coerced here, and any problem raises :class:`~intune_flow.errors.OptionsError` naming
the argument, what it got and the fix.

Adding a tuning argument touches this file (a field with its ``arg(...)`` metadata), the
signatures that show it (``tune()``, ``InTuneOperator``, ``intune_task``) and the docs; the
Metaflow attributes, the Airflow template fields and the CLI flags are derived from here.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Mapping

from .errors import CacheError, OptionsError, PipelineError, not_taken

SURFACES = ("tune", "cli", "metaflow", "airflow")
"""Where a user writes tuning arguments; ``probe`` uses the budget and window validators."""

_EVERYWHERE = SURFACES
_PYTHON = ("tune",)
_BLANK = ("", "none", "null")
_TRUE = {"true", "1", "yes", "on", "y", "t"}
_FALSE = {"false", "0", "no", "off", "n", "f"}
_REF = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
PIPELINE_FORM = '"package.module:function" (e.g. "intune_flow.examples.criteo:criteo_pipeline")'
"""How a pipeline reference is written, in every message that asks for one."""


def arg(default, kind: str, doc: str, surfaces: tuple[str, ...] = _EVERYWHERE, **kw):
    """A TuneOptions field: its default, how it is coerced (``kind``), its one-line doc and
    the surfaces that take it."""
    if isinstance(default, dict):
        return field(default_factory=dict, metadata=dict(kind=kind, doc=doc, surfaces=surfaces,
                                                         **kw))
    return field(default=default, metadata=dict(kind=kind, doc=doc, surfaces=surfaces, **kw))


@dataclass(frozen=True)
class TuneOptions:
    """The arguments of one tuning run (see ``tune()`` for their meaning)."""

    pipeline: Any = arg(None, "pipeline", 'the factory, a "package.module:function" string or a '
                                          'Pipeline')
    budget_s: float = arg(60.0, "seconds", "seconds a cold search may spend measuring (warm "
                                           "starts use a quarter, at least 5 s)", example=60)
    cache: Any = arg(None, "cache", "a directory, s3://bucket/prefix or memory://name (in "
                                    "Python also a Cache object; default: $INTUNE_FLOW_CACHE, "
                                    "else the user cache dir)")
    cpu_budget: float | None = arg(None, "cores", "cores the pipeline may use (default: what "
                                                  "this process may use)", example=2)
    ram_budget: int | None = arg(None, "bytes", 'bytes or a size such as "4GiB" (default: '
                                                'current RSS + half of the available memory)')
    strict: bool = arg(False, "bool", "raise TuningError when tuning fails instead of falling "
                                      "back")
    method: str = arg("intune", "method", "intune (the RL agent) or a baseline; one of {methods}")
    window_s: float | None = arg(None, "seconds", "measurement window per probe (default: 1/20 "
                                                  "of the search's budget, within 0.75-2 s)",
                                 example=2)
    timeout_s: float | None = arg(None, "seconds", "abandon a probe that sees no element, or the "
                                                   "factory's first build, after this long "
                                                   "(default: 30 s per probe, 60 s per build)",
                                  example=30)
    pipeline_kwargs: dict = arg({}, "kwargs", "keyword arguments for the factory")
    workers: str | None = arg(None, "workers", "scale out onto tf.data service workers: "
                                               "'local:N[xC]' (N worker processes of C cores "
                                               "here), 'ray:N[xC]' (a local Ray) or "
                                               "'ray://HOST:PORT:N[xC]', each with an optional "
                                               "':SIZE' RAM budget per worker ('local:4x1:2GiB');"
                                               " tuning picks how many of the N run and their "
                                               "knobs (default: this node only)",
                               example="local:2x1")
    demand: float | None = arg(None, "rate", "records/s the accelerator consumes (scale-out "
                                             "only, with workers=): tuning stops adding "
                                             "workers once the delivered rate meets it "
                                             "(default: no limit, the cheapest cost per "
                                             "record)", example=200000)
    seed: int | None = arg(None, "seed", "seed of the search's random choices",
                           surfaces=("tune", "cli"))
    progress: Any = arg(None, "progress", "None: a live line on a terminal, log lines "
                                          "otherwise; False: silent; or a callable per event",
                        surfaces=_PYTHON)
    s3_client: Any = arg(None, "object", "a boto3 S3 client for an s3:// cache",
                         surfaces=_PYTHON)

    # -- building ------------------------------------------------------------------------
    @classmethod
    def parse(cls, raw: Mapping[str, Any], *, where: str | Callable[[str], str] = "tune()",
              surface: str = "tune", deferred: Callable[[Any], bool] | None = None,
              source: str | None = None) -> "TuneOptions":
        """Coerce and validate ``raw`` (argument name -> value) into TuneOptions.

        ``where`` prefixes every message (``"@intune"``, ``"InTuneOperator"``; or a function
        of the argument name, as the CLI names its flags). Names not on
        ``surface`` are refused. A value for which ``deferred(value)`` is true (a Jinja
        template, an XComArg) is kept unchecked: it is known only when the task runs.
        ``source`` reads a string pipeline's module source without importing it:
        ``"required"`` (the module must be found), ``"optional"`` (checked where found).
        """
        at = where if callable(where) else (lambda name: where)
        where = at("")
        cls.refuse_unknown(raw, surface=surface, where=where)
        values = {}
        for f in fields(cls):
            if f.name not in raw:
                continue
            value = raw[f.name]
            values[f.name] = value if deferred is not None and deferred(value) else \
                coerce(f.name, value, where=at(f.name))
        options = cls(**values)
        if options.demand is not None and options.workers is None:
            raise OptionsError(f"{_at(at('demand'))}demand={options.demand} records/s applies "
                               "to scale-out only; give workers= too (e.g. workers='local:4x1')"
                               " or leave demand unset")
        if options.workers is not None and options.method not in (None, "intune"):
            raise OptionsError(f"{_at(at('method'))}method={options.method!r} does not apply "
                               "with workers=: scale-out runs the cluster agent with the node "
                               "agent (method='intune') nested; leave method unset, or drop "
                               "workers= to compare single-node methods")
        if options.pipeline is None:
            raise missing_pipeline(where)
        if source is not None and isinstance(options.pipeline, str) and not (
                deferred is not None and deferred(options.pipeline)):
            options._check_source(where, missing_ok=source == "optional", deferred=deferred)
        return options

    @classmethod
    def refuse_unknown(cls, names, *, surface: str = "tune", where: str = "") -> None:
        """Raise :class:`OptionsError` for any of ``names`` that ``surface`` does not take,
        naming the near miss (``budget`` -> ``budget_s``) and the names it takes."""
        known = cls.names(surface)
        unknown = set(names) - set(known)
        if unknown:
            otherwise = (" (the factory's own arguments go in pipeline_kwargs={...})"
                         if "pipeline_kwargs" in known else "")
            raise OptionsError(not_taken(where or "tune()", unknown, known,
                                         what="tuning arguments", otherwise=otherwise))

    @classmethod
    def names(cls, surface: str = "tune") -> tuple[str, ...]:
        """The argument names ``surface`` takes, in declaration order."""
        return tuple(f.name for f in fields(cls) if surface in f.metadata["surfaces"])

    @classmethod
    def defaults(cls, surface: str = "tune") -> dict[str, Any]:
        """Argument name -> default, for the arguments ``surface`` takes."""
        out = {}
        for f in fields(cls):
            if surface in f.metadata["surfaces"]:
                out[f.name] = {} if f.metadata["kind"] == "kwargs" else f.default
        return out

    @classmethod
    def doc(cls, name: str) -> str:
        """The one-line description of argument ``name`` (CLI help, docs)."""
        text = _field(name).metadata["doc"]
        if "{methods}" in text:
            from .search import METHODS

            text = text.format(methods=", ".join(METHODS))
        return text

    # -- using ---------------------------------------------------------------------------
    def tune_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``tune(options.pipeline, **options.tune_kwargs())``."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "pipeline"}

    @property
    def pipeline_name(self) -> str:
        """The pipeline as text: its reference, or ``module:qualname`` of a callable."""
        p = self.pipeline
        if isinstance(p, str):
            return p
        name = getattr(p, "name", None)
        if isinstance(name, str):
            return name
        return f"{getattr(p, '__module__', '?')}:{getattr(p, '__qualname__', repr(p))}"

    def to_dict(self) -> dict:
        """The options as JSON (the pipeline as its name; no client, no progress callback)."""
        out = {}
        for f in fields(self):
            if f.metadata["kind"] in ("object", "progress"):
                continue
            value = getattr(self, f.name)
            if f.name == "pipeline":
                value = self.pipeline_name
            elif f.name == "cache" and value is not None and not isinstance(value, str):
                value = getattr(value, "uri", repr(value))
            elif f.name == "workers" and value is not None and not isinstance(value, str):
                from .scaleout.pools.spec import PoolSpec

                value = str(PoolSpec.of(value))
            out[f.name] = value
        return out

    def budgets(self) -> tuple[float, int]:
        """(cpu_budget, ram_budget) for this machine: the defaults filled in, and a budget
        (or local workers) that this machine cannot give refused with the fix."""
        from .resources import current_rss, default_ram_budget, machine_ram, usable_cpus

        usable = usable_cpus()
        cpu = usable if self.cpu_budget is None else float(self.cpu_budget)
        if cpu > usable + 1e-9:
            raise OptionsError(f"cpu_budget={cpu:g} is more than the {usable:g} cores this "
                               f"process may use (CPU affinity / cgroup quota); pass at most "
                               f"{usable:g} or leave it None")
        if isinstance(self.workers, str):
            from .scaleout.pools.spec import parse_pool_spec

            pool = parse_pool_spec(self.workers)
            if pool.kind == "local" or _starts_local_ray(pool):   # workers on this machine
                from .scaleout.pools.local import check_fits

                check_fits(pool.max_workers, pool.cores_per_worker, pool.ram_per_worker,
                           kind=pool.kind)
        if self.ram_budget is None:
            return cpu, default_ram_budget()
        ram, rss, total = int(self.ram_budget), current_rss(), machine_ram()
        if ram <= rss:
            raise OptionsError(f"ram_budget={ram / 2**20:,.0f} MiB is below what this process "
                               f"already holds ({rss / 2**20:,.0f} MiB RSS), so no config could "
                               f"fit; give more (e.g. ram_budget=\"{(rss + 2**30) / 2**30:.0f}GiB\")"
                               " or leave it None")
        if ram > total:
            raise OptionsError(f"ram_budget={ram / 2**30:.1f} GiB is more than this machine's "
                               f"{total / 2**30:.1f} GiB (physical RAM / cgroup limit), so the "
                               f"memory guard could not stop a config before the machine runs "
                               f"out; pass at most \"{total / 2**30:.1f}GiB\" or leave it None")
        return cpu, ram

    def _check_source(self, where: str, *, missing_ok: bool, deferred) -> None:
        """What the factory's module source proves wrong, read without importing it."""
        from .reference import check_reference

        kwargs = self.pipeline_kwargs
        if deferred is not None and (deferred(kwargs) or any(deferred(v) for v in kwargs.values())):
            kwargs = None
        try:
            check_reference(self.pipeline, kwargs, what=f"{where} pipeline", missing_ok=missing_ok)
        except PipelineError as exc:    # each message names the surface, as the others do
            said = str(exc)
            raise PipelineError(said if not where or said.startswith(where)
                                else f"{_at(where)}{said}") from None


def _field(name: str):
    for f in fields(TuneOptions):
        if f.name == name:
            return f
    raise KeyError(name)


def coerce(name: str, value: Any, *, where: str = "tune()") -> Any:
    """Argument ``name``'s ``value`` coerced to its type, or OptionsError naming the fix."""
    f = _field(name)
    kind = f.metadata["kind"]
    text = value.strip() if isinstance(value, str) else None
    if text is not None and text.lower() in _BLANK and kind != "pipeline":
        value = text = None    # what Jinja renders for None, and an empty --with value
    if value is None:          # the argument's default
        return {} if kind == "kwargs" else f.default
    return _COERCE[kind](name, value, text, where, f.metadata)


def missing_pipeline(where: str) -> OptionsError:
    """The error of every surface given no pipeline (``where`` names the surface)."""
    return OptionsError(f"{_at(where)}needs pipeline={PIPELINE_FORM}, or the factory itself: "
                        "the dataset factory to tune")


def malformed_reference(ref, where: str = "") -> PipelineError:
    """The error of every surface given a pipeline reference not written as
    ``module:function``; a dotted one (``pkg.mod.fn``) is answered with its colon form."""
    module, _, attr = str(ref).strip().rpartition(".")
    guess = (f" (did you mean '{module}:{attr}'?)"
             if ":" not in str(ref) and module and attr.isidentifier() else "")
    return PipelineError(f"{_at(where)}pipeline reference {ref!r} is malformed{guess}; write "
                         f"it as {PIPELINE_FORM}")


def _at(where: str) -> str:
    """The message prefix naming the surface ("" where the caller already names it)."""
    return f"{where}: " if where else ""


def _problem(where, name, value, must: str, fix: str) -> OptionsError:
    return OptionsError(f"{_at(where)}{name} must be {must}, got {value!r}; {fix}")


def _positive(name, value, text, where, meta, unit="seconds"):
    unit_given = False
    if text is not None:
        try:
            value = float(text)
        except ValueError:
            unit_given = True   # "20s", "1 min": the unit is the name's
    example = meta.get("example", 60)
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value <= 0:
        bare = " (a bare number, no unit)" if unit_given else ""
        raise _problem(where, name, value, f"a positive number of {unit}{bare}",
                       f"e.g. {name}={example}")
    return float(value)


def _cores(name, value, text, where, meta):
    return _positive(name, value, text, where, meta, unit="cores")


def _rate(name, value, text, where, meta):
    return _positive(name, value, text, where, meta, unit="records/s")


def _bytes(name, value, text, where, meta):
    from .resources import parse_bytes

    if text is not None and text.isdigit():
        value = int(text)
    try:
        return parse_bytes(value)
    except ValueError:
        raise OptionsError(f"{_at(where)}{name} is not a memory size: {value!r}; use a positive "
                           "size such as 4GiB or 512MB, or a number of bytes") from None


def _bool(name, value, text, where, meta):
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if text is not None and text.lower() in _TRUE | _FALSE:
        return text.lower() in _TRUE
    raise _problem(where, name, value, "True or False", f"e.g. {name}=True")


def _method(name, value, text, where, meta):
    from .search import METHODS

    if text not in METHODS:
        raise _problem(where, name, value, f"one of {', '.join(METHODS)}",
                       "intune is the RL agent, the others are baselines")
    return text


def _cache(name, value, text, where, meta):
    from .cache import Cache, get_cache

    if isinstance(value, Cache):
        return value
    if text is None:
        raise _problem(where, name, value, "a URI or a Cache",
                       "use s3://bucket/prefix, /path/to/dir or memory://name")
    try:
        get_cache(text)   # parses the URI; contacts nothing
    except CacheError as exc:
        raise OptionsError(f"{_at(where)}cache: {exc}") from None
    return text


def _kwargs(name, value, text, where, meta):
    if text is not None:
        try:
            value = json.loads(text)
        except ValueError:
            raise _problem(where, name, value, "a dict (JSON on the command line)",
                           "e.g. '{\"batch_size\": 1024}'") from None
    if not isinstance(value, Mapping):
        raise _problem(where, name, value, "a dict of keyword arguments for the factory",
                       "e.g. {\"batch_size\": 1024}")
    bad = [k for k in value if not isinstance(k, str) or not k.isidentifier()]
    if bad:
        raise _problem(where, name, value, "a dict keyed by argument names",
                       f"these keys are not names: {bad}")
    return dict(value)


def _pipeline(name, value, text, where, meta):
    if text is None:
        if callable(value) or hasattr(value, "describe"):   # a factory or a Pipeline
            return value
        raise _problem(where, name, value, f"a factory or {PIPELINE_FORM}",
                       "pass a function f(knobs, **kwargs) or its reference")
    if not _REF.match(text):
        if not text or text.lower() in _BLANK:
            raise missing_pipeline(where)
        raise malformed_reference(value, where)
    return text


def _seed(name, value, text, where, meta):
    if text is not None and re.fullmatch(r"-?\d+", text):
        value = int(text)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _problem(where, name, value, "an integer or None", "e.g. seed=0")
    return value


def _progress(name, value, text, where, meta):
    if isinstance(value, bool) or callable(value):
        return value
    raise _problem(where, name, value, "None, False or a callable taking an event dict",
                   "None shows a live line on a terminal and log lines elsewhere")


def _workers(name, value, text, where, meta):
    from .scaleout.pools.base import WorkerPool
    from .scaleout.pools.spec import PoolSpec, parse_pool_spec

    if isinstance(value, WorkerPool):   # tune() only: a pool configured by the caller
        return value
    if isinstance(value, PoolSpec):
        return str(value)
    try:
        return str(parse_pool_spec(text if text is not None else value, name))
    except OptionsError as exc:
        raise OptionsError(f"{_at(where)}{exc}") from None


def _anything(name, value, text, where, meta):
    return value


_COERCE = {"seconds": _positive, "cores": _cores, "rate": _rate, "bytes": _bytes, "bool": _bool,
           "method": _method, "cache": _cache, "kwargs": _kwargs, "pipeline": _pipeline,
           "seed": _seed, "progress": _progress, "workers": _workers, "object": _anything}


def _starts_local_ray(pool) -> bool:
    """Whether a Ray pool spec starts a Ray on this machine: no cluster address in it, none
    in ``$RAY_ADDRESS``, and no Ray this process is connected to already."""
    if pool.kind != "ray" or pool.address is not None or os.environ.get("RAY_ADDRESS"):
        return False
    ray = sys.modules.get("ray")
    return not (ray is not None and getattr(ray, "is_initialized", lambda: False)())


__all__ = ["SURFACES", "TuneOptions", "coerce"]
