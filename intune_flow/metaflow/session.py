"""``current.intune``: what the ``@intune`` decorator hands the step it decorates."""

from __future__ import annotations

from typing import Any, Callable

from .attributes import Settings


class IntuneSession:
    """The outcome of the tuning phase, as seen from inside the step.

    ``config`` is the knob config the step should use, ``result`` the full
    :class:`~intune_flow.result.TuneResult` (None only when tuning itself crashed and no
    result could be made), ``source``/``reason`` say where the config came from and,
    on a fallback, why. ``dataset(**kwargs)`` builds the tuned dataset; keyword arguments
    go to the factory on top of the decorator's ``pipeline_kwargs``.

    The tuning phase runs once, through ``tuner() -> (result, reason)``: before the step
    body for a decorator written on the step, on first use for one attached with
    ``--with`` (which attaches it to every step; steps that never touch
    ``current.intune`` then cost nothing). ``on_tuned(session)`` is called after it.
    """

    def __init__(self, settings: Settings, tuner: Callable[[], tuple[Any, str | None]], *,
                 on_tuned: Callable[["IntuneSession"], None] | None = None,
                 cpu_budget: float | None = None, cache: str | None = None,
                 cache_origin: str | None = None):
        self.settings = settings
        self._tuner = tuner
        self._on_tuned = on_tuned
        self._result: Any = None
        self._reason: str | None = None
        self.tuned = False
        self.cpu_budget = cpu_budget
        self.cache = cache
        self.cache_origin = cache_origin

    def ensure_tuned(self) -> "IntuneSession":
        """Run the tuning phase if it has not run yet."""
        if not self.tuned:
            self._result, self._reason = self._tuner()
            self.tuned = True
            if self._on_tuned is not None:
                self._on_tuned(self)
        return self

    @property
    def result(self) -> Any:
        """The :class:`~intune_flow.result.TuneResult` (None if tuning crashed outright)."""
        return self.ensure_tuned()._result

    @property
    def pipeline(self) -> str:
        return self.settings.pipeline_name

    @property
    def config(self) -> dict[str, int]:
        """The knob config the step runs with (the factory's defaults when tuning crashed)."""
        if self.result is not None:
            return dict(self.result.config)
        return self._pipeline().space.defaults()

    @property
    def source(self) -> str:
        return self.result.source if self.result is not None else "fallback"

    @property
    def reason(self) -> str | None:
        """Why the tuning phase fell back (None when it did not)."""
        result = self.result
        if result is not None and getattr(result, "reason", None):
            return result.reason
        return self._reason

    def dataset(self, **factory_kwargs):
        """The pipeline built with the tuned config; ``factory_kwargs`` override ``pipeline_kwargs``."""
        if self.result is not None:
            return self.result.build(**factory_kwargs)
        return self._pipeline(**factory_kwargs).build(None, cpu_budget=self.cpu_budget)

    def _pipeline(self, **factory_kwargs):
        from ..pipeline import Pipeline

        return Pipeline.load(self.settings.pipeline, **{**self.settings.pipeline_kwargs,
                                                         **factory_kwargs})

    def to_dict(self) -> dict:
        """JSON-serializable record of the tuning phase (saved as the ``intune_result`` artifact)."""
        if self.result is not None:
            out = self.result.to_dict()
        else:
            out = {"config": self._safe_defaults(), "source": "fallback", "throughput": None,
                   "start_config": None, "start_throughput": None, "tuning_seconds": 0.0,
                   "seconds_saved": 0.0, "history": [], "fingerprint": None, "cache_key": None,
                   "cpu_budget": self.cpu_budget, "ram_budget": None,
                   "method": self.settings.method}
        out["reason"] = self.reason
        out["pipeline"] = self.pipeline
        out["cache"] = self.cache
        out["cache_origin"] = self.cache_origin
        out["settings"] = self.settings.to_dict()
        return out

    def _safe_defaults(self) -> dict | None:
        try:
            return self.config
        except Exception:  # the factory itself is broken; the record still says why
            return None

    def __repr__(self) -> str:
        if not self.tuned:
            return f"IntuneSession(pipeline={self.pipeline!r}, not tuned yet)"
        return f"IntuneSession(pipeline={self.pipeline!r}, source={self.source!r}, config={self.config})"
