"""The exact best config of a simulated pipeline under its CPU and RAM budgets.

For a target throughput ``X`` and fixed buffer sizes, the cheapest config that
reaches ``X`` gives every parallel stage the smallest grid value covering its
calls in flight (``X * svc / records``) and the pool the smallest grid value
covering their sum. Every cap of the model is monotone in the allocation and
memory and oversubscription only grow with it, so if any config reaches ``X``
the cheapest one does, and feasibility is monotone in ``X``: a bisection on
``X`` per buffer combination finds the optimum over the knob grids. A test
checks this against brute force on small pipelines.
"""

from __future__ import annotations

import bisect
import itertools
from typing import Mapping

from .model import SimPipeline, evaluate


def _ceil_grid(grid: tuple[int, ...], need: float) -> int | None:
    i = bisect.bisect_left(grid, need)
    return grid[i] if i < len(grid) else None


def minimal_config(p: SimPipeline, target: float, buffers: Mapping[str, int]) -> dict | None:
    """The cheapest config aiming at ``target`` records/s with the given buffer sizes (None: out of bounds)."""
    keep = 1.0
    for b in p.buffers:
        keep *= 1.0 - b.variability / (1.0 + buffers[b.knob]) ** 2
    raw = target / keep
    cfg = dict(buffers)
    demand = 0.0
    for s in p.stages:
        if s.knob is None:
            continue
        need = raw * s.svc / s.records
        demand += need
        v = _ceil_grid(p.space[s.knob].grid(), max(need, 1e-12))
        if v is None:
            return None
        cfg[s.knob] = v
    if p.threads_knob:
        v = _ceil_grid(p.space[p.threads_knob].grid(), max(demand, 1e-12))
        if v is None:
            return None
        cfg[p.threads_knob] = v
    return cfg


def _feasible(p, target, buffers, cores, ram_budget):
    cfg = minimal_config(p, target, buffers)
    if cfg is None:
        return None
    ev = evaluate(p, cfg, cores)
    if ev.memory > ram_budget or ev.throughput < target * (1 - 1e-9):
        return None
    return cfg, ev.throughput


def oracle_pipeline(p: SimPipeline, cores: float | None = None,
                    ram_budget: float | None = None, iters: int = 60) -> tuple[dict, float]:
    """(config, noise-free throughput) of the best config; throughput 0 if nothing fits the RAM budget."""
    cores = float(cores if cores is not None else p.cores)
    ram_budget = float(ram_budget if ram_budget is not None else p.ram_budget)
    best_cfg, best_x = None, -1.0
    grids = [p.space[b.knob].grid() for b in p.buffers]
    for sizes in itertools.product(*grids):
        buffers = {b.knob: v for b, v in zip(p.buffers, sizes)}
        ones = {k.name: k.min for k in p.space}
        hi = evaluate(p, {**ones, **{k.name: k.max for k in p.space if k.kind != "buffer"},
                          **buffers}, cores)
        # Upper bound: every stage and the pool at max with no contention.
        ub = min(c for n, c in hi.caps.items() if n != "cpu")
        ub = min(ub, cores / sum(s.cpu / s.records for s in p.stages))
        keep = 1.0
        for b in p.buffers:
            keep *= 1.0 - b.variability / (1.0 + buffers[b.knob]) ** 2
        hi_x = ub * keep
        if hi_x <= best_x:
            continue
        lo = _feasible(p, hi_x * 1e-9, buffers, cores, ram_budget)
        if lo is None:
            continue
        lo_x, hi_x = hi_x * 1e-9, hi_x * (1 + 1e-9)
        found = lo
        for _ in range(iters):
            mid = (lo_x * hi_x) ** 0.5 if lo_x > 0 else hi_x / 2
            got = _feasible(p, mid, buffers, cores, ram_budget)
            if got is None:
                hi_x = mid
            else:
                lo_x, found = max(mid, got[1]), got
                if got[1] >= hi_x:
                    break
            if hi_x / lo_x < 1 + 1e-9:
                break
        if found[1] > best_x:
            best_cfg, best_x = found
    if best_cfg is None:
        return {k.name: k.min for k in p.space}, 0.0
    return {k.name: int(best_cfg[k.name]) for k in p.space}, float(best_x)


def oracle(sim) -> tuple[dict, float]:
    """Best config and its noise-free throughput for a :class:`~intune_flow.sim.SimEnv` now."""
    return oracle_pipeline(sim.pipeline, sim.cpu_budget, sim.ram_budget)
