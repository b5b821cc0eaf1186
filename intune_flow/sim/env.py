"""``SimEnv``: the simulator behind the :class:`~intune_flow.env.TuningEnv` interface."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ..knobs import AUTOTUNE
from ..measurement import STATUS_OK, STATUS_OOM, Measurement
from .autotune import resolve_autotune
from .model import SimPipeline, evaluate


class SimEnv:
    """Measures configs of a :class:`SimPipeline` with noise, on a simulated clock.

    Each measurement costs ``build_s + window_s`` simulated seconds (an OOM is cut
    short after ``build_s + oom_s``). ``core_schedule`` is a list of
    ``(clock_seconds, cores)``: the machine changes size once the clock passes
    each time, as when a scheduler shrinks a container (or call :meth:`set_cores`).
    ``speed`` scales every throughput, as a machine shared with other busy jobs does;
    ``capacity()`` reports it, as the real env reports the CPU it gets.
    ``native_autotune=True`` models tf.data: a knob at AUTOTUNE is set by AUTOTUNE's
    hill-climb around the config's other values (:func:`~.autotune.resolve_autotune`),
    the measurement keeps the AUTOTUNE value and reports the choice in
    ``autotune_choices``; without it AUTOTUNE values start where ``concretize`` puts them.
    """

    def __init__(self, pipeline: SimPipeline, *, cores: float | None = None,
                 ram_budget: int | None = None, seed: int | None = 0, build_s: float = 0.5,
                 window_s: float = 2.0, oom_s: float = 0.5, signals: bool = True,
                 core_schedule: Sequence[tuple[float, float]] = (), speed: float = 1.0,
                 native_autotune: bool = False):
        self.pipeline = pipeline
        self.space = pipeline.space
        self.cpu_budget = float(cores if cores is not None else pipeline.cores)
        self.ram_budget = int(ram_budget if ram_budget is not None else pipeline.ram_budget)
        self.build_s, self.window_s, self.oom_s = build_s, window_s, oom_s
        self.signals = signals
        self._rng = np.random.default_rng(seed)
        self._clock = 0.0
        self._schedule = sorted(core_schedule)
        self.measurements = 0
        self.speed = float(speed)
        self.native_autotune = bool(native_autotune)

    def clock(self) -> float:
        return self._clock

    def set_cores(self, cores: float) -> None:
        """Change the machine's core count (and so the CPU budget) from now on."""
        self.cpu_budget = float(cores)

    def _advance(self, seconds: float) -> None:
        self._clock += seconds
        while self._schedule and self._schedule[0][0] <= self._clock:
            self.set_cores(self._schedule.pop(0)[1])

    def concrete(self, config: Mapping[str, int]) -> dict[str, int]:
        """The static config the pipeline runs for ``config`` (its AUTOTUNE values set)."""
        cfg = self.space.validate(config)
        if self.native_autotune:
            # every AUTOTUNE value resolved, unclamped: AUTOTUNE never sees a knob's bounds
            return resolve_autotune(self.pipeline, cfg, self.cpu_budget, self.pipeline.ram_total)
        return self.space.concretize(cfg, self.cpu_budget)

    def _reported(self, config: Mapping[str, int], ran: dict) -> tuple[dict, dict]:
        """(the config a measurement reports, what AUTOTUNE chose): with native AUTOTUNE the
        config as asked, AUTOTUNE values kept; without, the static config that ran."""
        if not self.native_autotune:
            return ran, {}
        asked = self.space.validate(config)
        return asked, {n: ran[n] for n, v in asked.items() if v == AUTOTUNE}

    def true_throughput(self, config: Mapping[str, int]) -> float:
        """Noise-free throughput of a config now; 0 when it passes the RAM budget."""
        ev = evaluate(self.pipeline, self.concrete(config), self.cpu_budget)
        return 0.0 if ev.memory > self.ram_budget else ev.throughput

    def capacity(self) -> float:
        """The machine's speed now (1.0: the simulated machine to itself)."""
        return self.speed

    def measure(self, config: Mapping[str, int], *, window_s: float | None = None,
                warmup_s: float | None = None) -> Measurement:
        window = self.window_s if window_s is None else float(window_s)
        ran = self.concrete(config)
        ev = evaluate(self.pipeline, ran, self.cpu_budget)
        cfg, chose = self._reported(config, ran)
        self.measurements += 1
        signals = dict(ev.signals) if self.signals else {}
        if ev.memory > self.ram_budget:
            self._advance(self.build_s + self.oom_s)
            return Measurement(config=cfg, status=STATUS_OOM, autotune_choices=chose, peak_rss=int(ev.memory),
                               seconds=self.build_s + self.oom_s, cpu_util=ev.cpu_util,
                               stage_signals=signals,
                               error=f"simulated RSS {ev.memory / 2**30:.2f} GiB passed the "
                                     f"RAM budget {self.ram_budget / 2**30:.2f} GiB")
        noise = float(np.exp(self._rng.normal(0.0, self.pipeline.noise)))
        x = ev.throughput * noise * self.speed
        seconds = self.build_s + window
        self._advance(seconds)
        # No element rate: the model's buffers absorb variability by their depth alone, with
        # no time scale for the smart start's floor by time (agent.allocations.BUFFER_SECONDS).
        return Measurement(config=cfg, throughput=x, elements_per_s=0.0, records_per_s=x,
                           spread=2 * self.pipeline.noise, cpu_util=ev.cpu_util,
                           peak_rss=int(ev.memory), seconds=seconds, status=STATUS_OK,
                           stage_signals=signals, autotune_choices=chose)
