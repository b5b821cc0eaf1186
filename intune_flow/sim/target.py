"""A simulated pipeline as :class:`~intune_flow.tune.TuningRun` sees a real one.

``SimTarget`` has what a :class:`~intune_flow.pipeline.Pipeline` gives the run (a name, a
description, factory arguments) and makes :class:`~intune_flow.sim.env.SimEnv`
environments, so the warm-start decision table runs in the simulator in milliseconds::

    target = SimTarget(sample_pipeline("test", 0))
    run = TuningRun(options, target, cpu_budget=8, ram_budget=..., cache=CacheSession(cache),
                    make_env=target.make_env)
    result = run.execute()
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

from ..pipeline import PipelineDescription
from .env import SimEnv
from .model import SimPipeline


class SimTarget:
    """``pipeline`` under a name; ``speed`` < 1 is a machine busy with other jobs, and
    ``slowed(factor)`` the same pipeline (same schema and knobs) doing more work per record."""

    ref = None
    kwargs: dict = {}

    def __init__(self, pipeline: SimPipeline, *, name: str = "sim:pipeline", seed: int = 0,
                 speed: float = 1.0, fail: bool = False):
        self.sim, self.name, self.seed, self.speed, self.fail = pipeline, name, seed, speed, fail
        self.envs: list[SimEnv] = []

    def describe(self, timeout_s: float | None = None) -> PipelineDescription:
        schema_hash = hashlib.sha256(json.dumps([self.name, self.sim.space.to_json()],
                                                sort_keys=True).encode()).hexdigest()[:32]
        return PipelineDescription(framework="sim", space=self.sim.space, implicit=(),
                                   schema={}, fingerprint=schema_hash, batched=False,
                                   batch_size=None, stages={}, adapter=None)

    def make_env(self, *, window_s: float = 2.0, timeout_s: float | None = None) -> SimEnv:
        """A fresh simulated environment (the run's clock starts at 0)."""
        env = _FailingEnv if self.fail else SimEnv
        made = env(self.sim, seed=self.seed + len(self.envs), window_s=window_s,
                   speed=self.speed)
        made.warmup_s = 0.0
        self.envs.append(made)
        return made

    def slowed(self, factor: float) -> "SimTarget":
        """The same pipeline with every stage's CPU cost times ``factor``."""
        stages = tuple(replace(s, cpu=s.cpu * factor) for s in self.sim.stages)
        return SimTarget(replace(self.sim, stages=stages), name=self.name, seed=self.seed,
                         speed=self.speed)


class _FailingEnv(SimEnv):
    """Every measurement raises: a pipeline whose every probe fails."""

    def measure(self, config, **kw):
        raise RuntimeError("simulated probe failure")
