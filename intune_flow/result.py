"""``TuneResult``: what ``tune()`` returns, JSON-serializable for XCom and Metaflow artifacts."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields

from .measurement import Measurement

SOURCES = ("cache", "refined", "transferred", "tuned", "fallback")


@dataclass
class TuneResult:
    """The chosen config and how it was found.

    ``source`` says where the config came from:

    - ``"cache"``: an exact cache hit, confirmed by a short verification probe
    - ``"refined"``: a hit whose config now delivers < 80% of its recorded throughput
      (data or machine drift), fine-tuned from the cached policy on a short budget
    - ``"transferred"``: no record for this hardware class; started from the record of
      the same schema and knob space on another class, on a short budget
    - ``"tuned"``: a miss, tuned from the shipped policy
    - ``"fallback"``: tuning failed (``reason`` says why); the cached config or the
      factory defaults, so training can still run

    ``autotune_throughput`` is what all knobs at tf.data's AUTOTUNE delivered in this run's
    search (or, for a cache hit, in the search that wrote the record); None where AUTOTUNE
    was not measured (torchdata, DataLoader, a fallback). ``vs_autotune`` is the config's
    throughput over it, both from that one search: on a cache hit the ratio of the night
    that tuned it, not today's short verification probe over that night's AUTOTUNE; 1.0
    where the config is all-AUTOTUNE.
    ``tuning_seconds`` is the wall time of the tuning phase (knob discovery, fingerprint,
    cache lookup, probes/search, write-back; not the import of the pipeline's module).
    ``seconds_saved`` is, for a run that found a record, the recorded cold tuning
    seconds minus this run's. Throughputs are records/s (elements/s when the batch size
    is unknown). Nothing secret is ever stored here.
    """

    config: dict[str, int]
    throughput: float = 0.0
    start_config: dict[str, int] = field(default_factory=dict)
    start_throughput: float = 0.0
    tuning_seconds: float = 0.0
    seconds_saved: float = 0.0
    source: str = "tuned"
    reason: str | None = None
    history: list[Measurement] = field(default_factory=list)
    fingerprint: str | None = None
    cache_key: str | None = None
    cpu_budget: float = 0.0
    ram_budget: int = 0
    method: str = "intune"
    pipeline: str | None = None          # "module:attr" when known: from_dict results can build()
    cache_uri: str | None = None         # the cache actually used (the local fallback on an outage)
    hardware_class: str | None = None
    warnings: list[str] = field(default_factory=list)
    pipeline_kwargs: dict = field(default_factory=dict)      # the factory arguments build() reuses
    pipeline_kwargs_not_kept: list[str] = field(default_factory=list)  # not JSON, or secret-like
    autotune_throughput: float | None = None  # all knobs at tf.data AUTOTUNE, where measured
    vs_autotune: float | None = None     # throughput / autotune_throughput, from one search
    # -- scale-out (tune(..., workers=...)); single-node results keep the defaults ----------
    workers: int = 0                     # tf.data service workers picked (0: all on the trainer)
    worker_pool: str | None = None       # the pool spec tuned on ("local:2x1"); None: one node
    cost_per_million: float | None = None  # $ per million records delivered (scaleout.cost)
    cluster_history: list[dict] = field(default_factory=list)  # every window over K
    worker_startups: list[list] = field(default_factory=list)  # [from K, to K, seconds, at s]
    scaleout_stages: list[dict] = field(default_factory=list)  # budget checks, ScaleWalk.stages

    def __post_init__(self):
        if self.vs_autotune is None and self.autotune_throughput and self.throughput:
            self.vs_autotune = self.throughput / self.autotune_throughput

    @classmethod
    def fallback(cls, reason: str, *, config: dict | None = None, what: str = "the factory "
                 "defaults", **fields_) -> "TuneResult":
        """The result of a run that could not tune: ``config`` (the cached config or the
        factory defaults, named by ``what``) with the reason, so training can go on."""
        return cls(config=dict(config or {}), source="fallback",
                   reason=f"{reason}; using {what}", **fields_)

    def bind(self, pipeline) -> "TuneResult":
        """Remember the factory (or Pipeline object) that was tuned, so :meth:`build` and
        :meth:`serve` work even for a factory that cannot be imported again by name (one
        defined in ``__main__`` or in a function); returns the result."""
        self._pipeline = pipeline
        self._loaded = {}
        return self

    def build(self, **factory_kwargs):
        """The dataset with the chosen config and the tuning-time factory arguments
        (``factory_kwargs`` override them). In another process (``from_dict``), arguments
        the result could not keep (``pipeline_kwargs_not_kept``) must be passed again."""
        pipe = self.pipeline_object(**factory_kwargs)
        return pipe.build(self.config, cpu_budget=self.cpu_budget or None)

    def pipeline_object(self, **factory_kwargs):
        """The tuned :class:`~intune_flow.pipeline.Pipeline` with the tuning-time factory
        arguments (``factory_kwargs`` override them), as :meth:`build` loads it."""
        from .errors import PipelineError
        from .pipeline import Pipeline

        # One Pipeline per set of JSON factory arguments, so that later builds of this result
        # skip the knob discovery's dry builds (README-only trial 90: 1.9 s a build); other
        # arguments (a client, a lock) may compare equal while they differ, so are not kept.
        try:
            key = json.dumps(factory_kwargs, sort_keys=True)
        except (TypeError, ValueError):
            key = None
        loaded = self.__dict__.setdefault("_loaded", {})
        if key in loaded:
            return loaded[key]
        bound = getattr(self, "_pipeline", None)
        if bound is not None:
            pipe = Pipeline.load(bound, **factory_kwargs)
        elif self.pipeline:
            missing = [n for n in self.pipeline_kwargs_not_kept if n not in factory_kwargs]
            if missing:
                raise PipelineError(
                    f"{self.pipeline} was tuned with factory arguments {missing} that the result "
                    f"does not keep (not JSON, or named like a secret); pass them again: "
                    f"result.build({', '.join(f'{n}=...' for n in missing)})")
            pipe = Pipeline.load(self.pipeline, **{**self.pipeline_kwargs, **factory_kwargs})
        else:
            raise PipelineError("this result does not know its pipeline (it was tuned from a "
                                "function that is not importable as module:attr); give it the "
                                "factory again: result.bind(factory).build() (or .serve())")
        if key is not None:
            loaded[key] = pipe
        return pipe

    def serve(self, *, processing_mode: str = "parallel_epochs", pool=None,
              replace_lost: bool = True, **factory_kwargs):
        """A context manager yielding the dataset to train on: with ``workers`` > 0 it starts
        that many workers of ``worker_pool`` (or uses ``pool``), yields the worker side
        distributed to them with the chosen per-worker config, replaces a worker that dies
        (``replace_lost``), and stops every worker on exit; with no workers it yields
        :meth:`build`'s dataset. See :func:`intune_flow.scaleout.serve`."""
        from .scaleout.serve import serve

        return serve(self, processing_mode=processing_mode, pool=pool,
                     replace_lost=replace_lost, **factory_kwargs)

    @property
    def speedup(self) -> float:
        """Throughput over the start config's throughput (0 when unknown)."""
        return self.throughput / self.start_throughput if self.start_throughput > 0 else 0.0

    def to_dict(self) -> dict:
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "history":
                value = [_clean(m.to_dict()) for m in value]
            out[f.name] = _clean(value)
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "TuneResult":
        names = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        kwargs["history"] = [Measurement.from_dict(m) for m in kwargs.get("history", [])]
        for key in ("config", "start_config"):
            if key in kwargs:
                kwargs[key] = {str(k): int(v) for k, v in (kwargs[key] or {}).items()}
        return cls(**kwargs)

    def versus_autotune(self) -> str:
        """``vs_autotune`` in words (``"1.4 times AUTOTUNE"``), ``" when tuned"`` added on a
        cache hit, whose figure is the night that tuned it, printed beside today's look; ""
        where AUTOTUNE was not measured."""
        return versus_autotune_words(self.vs_autotune, self.source)

    def summary(self) -> str:
        """One line for logs."""
        extra = f" ({self.reason})" if self.reason else ""
        if not self.throughput:    # a fallback measured nothing: no figures to show
            config = self.config or "the factory defaults"
            return (f"source={self.source} nothing measured, "
                    f"tuning={self.tuning_seconds:.1f}s config={config}{extra}")
        versus = f" ({v})" if (v := self.versus_autotune()) else ""
        return (f"source={self.source} throughput={self.throughput:,.0f}/s{versus} "
                f"start={self.start_throughput:,.0f}/s tuning={self.tuning_seconds:.1f}s "
                f"config={self.config}{extra}")


SECRET_LIKE = ("secret", "password", "passwd", "token", "credential", "access_key", "private_key",
               "api_key")


def portable_kwargs(kwargs: dict) -> tuple[dict, list[str]]:
    """The factory arguments a result can carry to another process, and the names it cannot.

    Kept: values made only of JSON's own kinds (tuples become lists). Not kept: anything
    else (paths, arrays, clients, NaN) and arguments named like a secret, since results
    travel through XCom, Metaflow artifacts and logs.
    """
    kept, dropped = {}, []
    for name, value in kwargs.items():
        if _plain(value) and not any(word in name.lower() for word in SECRET_LIKE):
            kept[name] = _clean(value)
        else:
            dropped.append(name)
    return kept, dropped


def _plain(value) -> bool:
    """Only JSON's own kinds (and tuples), all the way down; floats finite."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, (str, int, bool))


def _clean(value):
    """JSON-safe copy: dicts/lists recursively, non-finite floats to None, numpy scalars to Python."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def versus_autotune_words(ratio: float | None, source: str | None) -> str:
    """A ratio to AUTOTUNE in words (``"1.4 times AUTOTUNE"``), ``" when tuned"`` added where
    ``source`` is a cache hit (the figure is the night that tuned it); "" without a ratio."""
    if not ratio:
        return ""
    when = " when tuned" if source == "cache" else ""
    return f"{ratio:.1f} times AUTOTUNE{when}"
