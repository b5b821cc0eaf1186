"""``current.intune``: what the ``@intune`` decorator hands the step it decorates."""

from __future__ import annotations

from typing import Callable

from ..options import TuneOptions
from ..result import TuneResult


class IntuneSession:
    """The outcome of the tuning phase, as seen from inside the step.

    ``config`` is the knob config the step should use, ``result`` the full
    :class:`~intune_flow.result.TuneResult`, ``source``/``reason`` say where the config
    came from and, on a fallback, why; ``settings`` are the decorator's
    :class:`~intune_flow.options.TuneOptions`. ``dataset(**kwargs)`` builds the tuned
    dataset; keyword arguments go to the factory on top of the decorator's
    ``pipeline_kwargs``.

    The tuning phase runs once, through ``tuner() -> TuneResult``: before the step body
    for a decorator written on the step, on first use for one attached with ``--with``
    (which attaches it to every step; steps that never touch ``current.intune`` then cost
    nothing). ``on_tuned(session)`` is called after it.
    """

    def __init__(self, settings: TuneOptions, tuner: Callable[[], TuneResult], *,
                 on_tuned: Callable[["IntuneSession"], None] | None = None,
                 cpu_budget: float | None = None, cache: str | None = None,
                 cache_origin: str | None = None):
        self.settings = settings
        self._tuner = tuner
        self._on_tuned = on_tuned
        self._result: TuneResult | None = None
        self.cpu_budget = cpu_budget
        self.cache = cache
        self.cache_origin = cache_origin
        self._served = None

    @property
    def tuned(self) -> bool:
        return self._result is not None

    def ensure_tuned(self) -> "IntuneSession":
        """Run the tuning phase if it has not run yet."""
        if self._result is None:
            self._result = self._tuner()
            if self._on_tuned is not None:
                self._on_tuned(self)
        return self

    @property
    def result(self) -> TuneResult:
        """The :class:`~intune_flow.result.TuneResult` of the tuning phase."""
        return self.ensure_tuned()._result

    @property
    def pipeline(self) -> str:
        return self.settings.pipeline_name

    @property
    def config(self) -> dict[str, int]:
        """The knob config the step runs with."""
        return dict(self.result.config)

    @property
    def source(self) -> str:
        return self.result.source

    @property
    def reason(self) -> str | None:
        """Why the tuning phase fell back, or a note about it (None otherwise)."""
        return self.result.reason

    def dataset(self, **factory_kwargs):
        """The pipeline built with the tuned config; ``factory_kwargs`` override ``pipeline_kwargs``.
        For a scale-out result (``workers=``) it starts the chosen workers and returns the
        dataset distributed to them; they stop when the step ends (:meth:`close`)."""
        if not self.result.workers:
            return self.result.build(**factory_kwargs)
        from ..scaleout.serve import Served

        self._served = self._served or Served()
        return self._served.open(self.result, **factory_kwargs)

    def close(self) -> None:
        """Stop the workers :meth:`dataset` started (the decorator calls it after the step)."""
        if self._served is not None:
            self._served.close()

    def to_dict(self) -> dict:
        """JSON-serializable record of the tuning phase (saved as the ``intune_result`` artifact)."""
        out = self.result.to_dict()
        out["pipeline"] = self.pipeline
        out["cache"] = self.cache
        out["cache_origin"] = self.cache_origin
        out["settings"] = self.settings.to_dict()
        return out

    def __repr__(self) -> str:
        if not self.tuned:
            return f"IntuneSession(pipeline={self.pipeline!r}, not tuned yet)"
        return f"IntuneSession(pipeline={self.pipeline!r}, source={self.source!r}, config={self.config})"
