"""``PipelineEnv``: the real pipeline behind the :class:`~intune_flow.env.TuningEnv` interface."""

from __future__ import annotations

import dataclasses
import time
from typing import Mapping

from .bounded import run_bounded
from .knobs import KnobSpace
from .measurement import Measurement
from .resources import cpu_capacity, default_ram_budget, usable_cpus


class PipelineEnv:
    """Measures configs of a real pipeline with :func:`intune_flow.probe.probe`.

    ``cpu_budget`` defaults to the cores usable at each measurement (so a shrinking CPU
    affinity or cgroup quota is seen by continuous tuning), ``ram_budget`` (bytes or "4GiB") to
    :func:`intune_flow.resources.default_ram_budget`. ``clock()`` is wall seconds since
    creation. ``measure`` accepts any valid config, AUTOTUNE values and concretized
    configs included; ``window_s``/``warmup_s`` there override the env's own for one probe.
    ``capacity()`` reads how much CPU work this process gets done right now. ``memory``
    goes to the probe (what its RAM guard reads; default this process's RSS).

    Where the framework compares builds before probing (``SIGNATURE_PER_PROBE``: a torch
    DataLoader), a config that builds the very loader an earlier config measured (any
    prefetch factor without workers) is not measured again: its measurement is that one's,
    with ``same_as`` naming the config measured.
    """

    def __init__(self, pipeline, *, cpu_budget: float | None = None, ram_budget=None,
                 window_s: float = 2.0, warmup_s: float = 0.5, timeout_s: float = 30.0,
                 memory=None):
        from .options import coerce
        from .pipeline import Pipeline

        where = "PipelineEnv"
        self._start = time.perf_counter()
        self.pipeline = Pipeline.load(pipeline)
        self._cpu_budget = coerce("cpu_budget", cpu_budget, where=where)
        self.ram_budget = coerce("ram_budget", ram_budget, where=where) or default_ram_budget()
        self.window_s, self.warmup_s, self.timeout_s = window_s, warmup_s, timeout_s
        self.memory = memory
        self._measured: dict[tuple, Measurement] = {}
        self._compares: bool | None = None   # False once a build had no signature

    @property
    def cpu_budget(self) -> float:
        """The given budget, or the cores usable right now (follows affinity/cgroup changes)."""
        return self._cpu_budget if self._cpu_budget is not None else usable_cpus()

    @property
    def native_autotune(self) -> bool:
        """True for tf.data: AUTOTUNE values hand the knobs to tf.data's own tuner."""
        return self.pipeline.framework == "tf.data"

    @property
    def kept_from_autotune(self) -> tuple[str, ...]:
        """Knobs that set an interleave's ``cycle_length`` (tf.data): at AUTOTUNE, tf.data
        decides it from the available CPU, which on a small machine caps a read that needs
        more concurrent files. A hybrid config keeps them static."""
        if not self.native_autotune:
            return ()
        try:
            stages = self.pipeline.stages
        except Exception:  # noqa: BLE001 - no stages known: nothing to keep
            return ()
        return tuple(name for name, found in stages.items()
                     if any(where.param == "cycle_length" for where in found))

    @property
    def space(self) -> KnobSpace:
        """The pipeline's search space: its inert knobs held at their defaults."""
        return self.pipeline.describe().search_space

    def measure(self, config: Mapping[str, int], *, window_s: float | None = None,
                warmup_s: float | None = None) -> Measurement:
        from .probe import probe

        started = time.perf_counter()
        signature = self._signature(config)
        if signature is not None:   # a measurement holds for the cores it was taken on
            signature = (signature, self.cpu_budget)
        twin = self._measured.get(signature) if signature is not None else None
        if twin is not None and twin.config != dict(config):
            return dataclasses.replace(twin, config=dict(config), same_as=dict(twin.config),
                                       seconds=time.perf_counter() - started)
        m = probe(self.pipeline, dict(config),
                  window_s=self.window_s if window_s is None else window_s,
                  warmup_s=self.warmup_s if warmup_s is None else warmup_s,
                  ram_budget=self.ram_budget, cpu_budget=self.cpu_budget,
                  timeout_s=self.timeout_s, memory=self.memory)
        if signature is not None and m.ok:
            self._measured.setdefault(signature, m)
        return m

    def _signature(self, config: Mapping[str, int]) -> bytes | None:
        """What ``config`` builds, where the framework compares builds before probing; None
        otherwise and when discovery or the build fails or hangs (the probe reports those)."""
        if self._compares is None:
            try:
                adapter = self.pipeline.describe(self.timeout_s).adapter
                self._compares = adapter.SIGNATURE_PER_PROBE
            except Exception:  # noqa: BLE001 - the probe describes again and reports it
                return None
        if not self._compares:
            return None
        signature, _, _ = run_bounded(lambda: self.pipeline.signature(config), self.timeout_s)
        if signature is None:
            self._compares = False   # one build not comparable by value: the rest are alike
        return signature

    def capacity(self) -> float:
        """CPU work per second this process gets on its budget's cores now
        (:func:`~intune_flow.resources.cpu_capacity`)."""
        return cpu_capacity(self.cpu_budget)

    def clock(self) -> float:
        return time.perf_counter() - self._start
