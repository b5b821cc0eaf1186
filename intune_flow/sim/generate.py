"""Random pipelines and machines, with disjoint seed streams for pretraining and evaluation."""

from __future__ import annotations

import math

import numpy as np

from ..knobs import AUTOTUNE, Knob, KnobSpace
from .model import Buffer, SimPipeline, Stage

SPLITS = {"train": 0, "eval": 1, "test": 2}
_DOMAIN = 0x1A7E_F10


def pipeline_rng(split: str, index: int) -> np.random.Generator:
    """The generator for pipeline ``index`` of a split.

    Streams of different splits come from different SeedSequence entropies, so the
    pipelines used in pretraining never reappear in the evaluation benchmark.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; use one of {sorted(SPLITS)}")
    return np.random.default_rng(np.random.SeedSequence([_DOMAIN, SPLITS[split], int(index)]))


def sample_pipeline(split: str, index: int, **kwargs) -> SimPipeline:
    """``random_pipeline`` drawn from the split's own seed stream."""
    p = random_pipeline(pipeline_rng(split, index), **kwargs)
    return _with_seed(p, (split, int(index)))


def _with_seed(p: SimPipeline, seed: tuple) -> SimPipeline:
    object.__setattr__(p, "seed", seed)
    return p


def _logu(rng, lo, hi):
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def random_pipeline(rng: np.random.Generator, n_stages: int | None = None,
                    cores: int | None = None, *, mem_tightness: float | None = None,
                    threads_knob: bool | None = None) -> SimPipeline:
    """A random pipeline of 2-12 stages on a machine of 2-128 cores.

    Stage 0 reads chunks of records (often latency-bound: remote reads); a batch
    stage may group records into batches; stages after it work per batch. About
    one pipeline in three is memory-tight (the unconstrained best config would not
    fit the RAM budget).
    """
    from .oracle import oracle_pipeline  # local: oracle imports this module's users

    n = int(n_stages if n_stages is not None else rng.integers(2, 13))
    if not 1 <= n <= 16:
        raise ValueError(f"n_stages must be in 1..16, got {n}")
    cores = int(cores if cores is not None else 2 ** rng.integers(1, 8))
    record_bytes = _logu(rng, 200, 20_000)
    batch_at = int(rng.integers(1, n)) if n >= 3 and rng.random() < 0.7 else None
    batch = int(2 ** rng.integers(4, 11)) if batch_at is not None else 1
    io_heavy = rng.random() < 0.5
    stages = []
    recs = 1.0
    knobs: list[Knob] = []
    par_max = int(rng.choice([32, 64, 128, 256], p=[0.15, 0.25, 0.3, 0.3]))
    for i in range(n):
        if i == 0:
            name = "read"
            chunk = float(2 ** rng.integers(0, 8))
            cpu = chunk * _logu(rng, 2e-6, 5e-5)
            io = _logu(rng, 2e-3, 0.2) if io_heavy else cpu * _logu(rng, 0.01, 1.0)
            recs, mem = chunk, chunk * record_bytes * 2
        elif batch_at is not None and i == batch_at:
            name = "batch"
            recs = float(batch)
            cpu = batch * _logu(rng, 2e-7, 5e-6)
            io = 0.0
            mem = batch * record_bytes
        else:
            name = f"map{i}"
            per_rec = _logu(rng, 1e-6, 2e-4)
            cpu = per_rec * (recs if recs > 1 and batch_at is not None and i > batch_at else 1.0)
            if i > 0 and (batch_at is None or i < batch_at):
                recs = 1.0
            io = cpu * _logu(rng, 0.5, 50) if rng.random() < 0.15 else 0.0
            mem = recs * record_bytes * _logu(rng, 1, 4)
        sequential = i > 0 and rng.random() < 0.12
        knob = None
        if not sequential:
            knob = name
            knobs.append(Knob(name, "parallelism", 1, par_max, AUTOTUNE))
        stages.append(Stage(name=name, cpu=cpu, io=io, records=recs, mem=mem, knob=knob))
    buffers = [Buffer("prefetch", n - 1, stages[-1].records * record_bytes, rng.uniform(0.05, 0.6))]
    if n >= 3 and rng.random() < 0.5:
        at = int(rng.integers(0, n - 1))
        buffers.insert(0, Buffer(f"buffer{at}", at, stages[at].records * record_bytes,
                                 rng.uniform(0.02, 0.3)))
    for b in buffers:
        knobs.append(Knob(b.knob, "buffer", 1, int(rng.choice([16, 32, 64])), AUTOTUNE))
    use_pool = (rng.random() < 0.85) if threads_knob is None else threads_knob
    if use_pool:
        knobs.append(Knob("threadpool", "threads", 1, int(rng.choice([256, 512, 1024])), AUTOTUNE))
    ram_total = int(cores * _logu(rng, 2, 8) * 2**30)
    ram_budget = ram_total // 2
    base_mem = ram_budget * rng.uniform(0.05, 0.4)
    p = SimPipeline(stages=tuple(stages), buffers=tuple(buffers), space=KnobSpace(tuple(knobs)),
                    cores=cores, ram_total=ram_total, ram_budget=ram_budget, base_mem=base_mem,
                    contention=_logu(rng, 0.02, 0.3), noise=rng.uniform(0.01, 0.04),
                    threads_knob="threadpool" if use_pool else None)
    # Scale memory so the unconstrained best uses a chosen share of what is left.
    tight = mem_tightness if mem_tightness is not None else (
        _logu(rng, 1.2, 4.0) if rng.random() < 0.33 else _logu(rng, 0.02, 0.6))
    free_budget = SimPipeline(**{**p.__dict__, "ram_budget": 1 << 62})
    cfg, _ = oracle_pipeline(free_budget)
    from .model import evaluate
    free = ram_budget - base_mem
    used = evaluate(free_budget, cfg).memory - base_mem
    used_ones = evaluate(free_budget, p.space.ones()).memory - base_mem
    # Never so tight that even the all-ones config would not fit.
    scale = min(tight * free / max(used, 1.0), 0.5 * free / max(used_ones, 1.0))
    stages = tuple(Stage(s.name, s.cpu, s.io, s.records, s.mem * scale, s.knob) for s in stages)
    buffers = tuple(Buffer(b.knob, b.after, b.elem_bytes * scale, b.variability) for b in buffers)
    return SimPipeline(**{**p.__dict__, "stages": stages, "buffers": buffers})
