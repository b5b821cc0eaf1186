"""A queueing-model simulator of staged input pipelines, its exact oracle and AUTOTUNE's hill-climb."""

from .autotune import autotune_config, autotune_hillclimb, resolve_autotune
from .env import SimEnv
from .generate import pipeline_rng, random_pipeline, sample_pipeline
from .model import Buffer, SimPipeline, Stage, evaluate
from .oracle import oracle, oracle_pipeline

__all__ = ["Buffer", "SimEnv", "SimPipeline", "Stage", "autotune_config", "autotune_hillclimb",
           "evaluate", "oracle", "oracle_pipeline", "pipeline_rng", "random_pipeline",
           "resolve_autotune", "sample_pipeline"]
