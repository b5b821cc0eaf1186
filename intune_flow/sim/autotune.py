"""tf.data AUTOTUNE's hill-climb (tensorflow/core/framework/model.cc) run on the sim's model.

As in tf.data: parallelism starts at 1 and is capped at the core count, the
private thread pool is fixed at the core count, prefetch buffers start at 1 and
grow by doubling, the RAM budget is 50% of the machine's RAM and counts only the
pipeline's own buffers and in-flight elements (not the rest of the process). Each
round raises the one parameter whose increment improves the modelled output time
most; parallelism is raised even without gain, buffers only with a gain, until
the model's optimum (all parameters at max) is reached, everything is at max, or
the memory estimate passes the budget.

A config may hand only some knobs to AUTOTUNE (:func:`resolve_autotune`): the others
stay where the config puts them, and a parallelism's cap is the thread pool it runs on
(a private pool the config sets, or the cores), as tf.data caps it at
``runner_threadpool_size``: not the knob's maximum, which bounds the search's static
values only (tf.data never sees it).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Mapping

from ..knobs import AUTOTUNE
from .model import SimPipeline, evaluate

PRECISION = 1e-9


def _pipeline_memory(p: SimPipeline, cfg, cores) -> float:
    return evaluate(p, cfg, cores).memory - p.base_mem


def autotune_config(p: SimPipeline, cores: float, ram_total: int | None = None,
                    fixed: Mapping[str, int] | None = None) -> tuple[dict, int]:
    """(config, rounds) AUTOTUNE settles on for ``p`` on ``cores`` cores, every knob but
    those ``fixed`` sets to a value other than AUTOTUNE handed to it."""
    cores_i = max(1, int(round(cores)))
    budget = 0.5 * (ram_total if ram_total is not None else p.ram_total)
    held = {n: int(v) for n, v in (fixed or {}).items() if v != AUTOTUNE}
    pool = held.get(p.threads_knob, cores_i) if p.threads_knob else cores_i
    cfg, cap = {}, {}
    for k in p.space:
        if k.name in held:
            cfg[k.name] = k.clamp(held[k.name])
        elif k.kind == "threads":
            cfg[k.name] = k.clamp(cores_i)
        else:
            cfg[k.name] = k.min
            cap[k.name] = pool if k.kind == "parallelism" else k.max
    top = {**cfg, **cap}
    target = evaluate(p, top, cores).throughput
    rounds = 0
    while True:
        x = evaluate(p, cfg, cores).throughput
        if x >= target * (1 - PRECISION) or all(cfg[n] >= cap[n] for n in cap):
            break
        if _pipeline_memory(p, cfg, cores) > budget:
            break
        best, best_delta = None, -float("inf")
        for name in cap:
            if cfg[name] >= cap[name]:
                continue
            kind = p.space[name].kind
            old = cfg[name]
            cfg[name] = min(cap[name], old * 2 if kind == "buffer" else old + 1)
            delta = evaluate(p, cfg, cores).throughput - x
            cfg[name] = old
            if delta > best_delta and (delta > PRECISION * x or kind != "buffer"):
                best, best_delta = name, delta
        if best is None:
            break
        old = cfg[best]
        cfg[best] = min(cap[best], old * 2 if p.space[best].kind == "buffer" else old + 1)
        if _pipeline_memory(p, cfg, cores) > budget:
            cfg[best] = old
            break
        rounds += 1
    return cfg, rounds


def resolve_autotune(p: SimPipeline, config: Mapping[str, int], cores: float,
                     ram_total: int | None = None) -> dict:
    """``config`` with its AUTOTUNE values replaced by what AUTOTUNE settles on around the
    values it fixes (the config itself when it holds none)."""
    if AUTOTUNE not in config.values():
        return dict(config)
    return dict(_resolved(p, tuple(sorted(config.items())), float(cores), ram_total))


@lru_cache(maxsize=65536)
def _resolved(p: SimPipeline, key: tuple, cores: float, ram_total: int | None) -> tuple:
    # Pretraining's teacher resolves the same configs many times: the hill-climb is cached.
    cfg, _ = autotune_config(p, cores, ram_total, fixed=dict(key))
    return tuple(sorted(cfg.items()))


def autotune_hillclimb(sim) -> tuple[dict, int]:
    """AUTOTUNE's config for a :class:`~intune_flow.sim.SimEnv` at its current core count."""
    return autotune_config(sim.pipeline, sim.cpu_budget, sim.pipeline.ram_total)
