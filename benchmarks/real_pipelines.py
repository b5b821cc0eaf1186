"""Real pipelines on this machine: every method's config, measured side by side.

For each reference pipeline, each method searches (or picks) a config under the same time
budget; then every chosen config is measured interleaved (A B C A B C ...) several times
and reported as median with min-max. Run through ``python -m benchmarks``.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass, field

from intune_flow.measurement import STATUS_OK

from .common import interleaved, summary

SEARCHED = ("hillclimb", "random", "optuna")


@dataclass
class Case:
    """One pipeline under test and why it is interesting."""

    name: str
    ref: str
    kind: str
    kwargs: dict = field(default_factory=dict)
    ram_headroom_mib: int | None = None   # RAM budget = RSS at all-ones + this (memory-tight cases)


CASES = {
    "cpu": Case("cpu", "examples.criteo:criteo_pipeline", "CPU-bound parse/transform, local TFRecord"),
    "latency": Case("latency", "examples.criteo_remote:criteo_remote_pipeline",
                    "I/O-latency-bound remote reads (20 ms per GET)", {"latency_ms": 20.0}),
    "memory": Case("memory", "examples.criteo_memory:criteo_memory_pipeline",
                   "memory-tight: big objects and batches, RAM budget binds", {},
                   ram_headroom_mib=768),
    "torch": Case("torch", "examples.criteo_torch:criteo_torch_pipeline",
                  "torchdata.nodes, Parquet row groups, thread workers"),
}


def ram_budget_for(case: Case) -> int | None:
    """Memory-tight cases: the headroom over this process's RSS now, per phase.

    RSS is process-wide and its floor creeps up as earlier probes leave allocator
    high-water marks behind, so one budget fixed at the start would, after minutes of
    searching, be passed by every config (all-ones included). Each search and the
    final side-by-side measurement get the same headroom over their own baseline.
    """
    from intune_flow.resources import current_rss

    return current_rss() + case.ram_headroom_mib * 2**20 if case.ram_headroom_mib else None


def _violations(measurements, ram_budget, margin) -> int:
    return sum(1 for m in measurements if m.peak_rss > ram_budget * (1 + margin))


def run_case(case: Case, *, budget_s: float, repeats: int, window_s: float,
             long_budget_s: float, seed: int = 0, log=print) -> dict:
    """Search with every method, then measure every chosen config interleaved."""
    from intune_flow import tune
    from intune_flow.pipeline import Pipeline
    from intune_flow.probe import probe
    from intune_flow.real_env import PipelineEnv
    from intune_flow.resources import RSS_MARGIN
    from intune_flow.search import run_search

    pipeline = Pipeline.load(case.ref, **case.kwargs)
    space = pipeline.space
    if case.ram_headroom_mib:
        probe(pipeline, space.ones(), window_s=0.5, warmup_s=0.2)  # settle the framework's RSS

    def env():
        return PipelineEnv(pipeline, ram_budget=ram_budget_for(case), window_s=window_s, warmup_s=0.3)

    budget_bytes = env().ram_budget
    log(f"[{case.name}] {case.ref}  knobs={list(space.names)}  "
        f"ram budget {budget_bytes / 2**30:.2f} GiB")
    picks: dict[str, dict] = {}
    every_measurement = []

    def pick(name, config, seconds, history, budget=None, **extra):
        budget = budget or budget_bytes
        picks[name] = {"config": dict(config), "tuning_seconds": round(seconds, 2),
                       "search_violations": _violations(history, budget, RSS_MARGIN),
                       "search_errors": sum(1 for m in history if m.status not in (STATUS_OK, "oom")),
                       "measurements": len(history), **extra}
        every_measurement.extend(history)
        log(f"  {name:<12} -> {config}  ({seconds:.1f} s, {len(history)} measurements)")

    pick("ones", space.ones(), 0.0, [])
    if pipeline.framework == "tf.data":
        pick("autotune", space.autotune(), 0.0, [])
    outcome = run_search(env(), "heuristic", budget_s=budget_s, progress=False)
    pick("heuristic", outcome.best.config, 0.0, [])
    for method in SEARCHED:
        search_env = env()
        outcome = run_search(search_env, method, budget_s=budget_s, seed=seed, progress=False)
        pick(method, outcome.best.config, outcome.seconds, outcome.history,
             budget=search_env.ram_budget)

    cache_dir = tempfile.mkdtemp(prefix="intune-bench-cache-")
    try:
        for name in ("intune_cold", "intune_warm"):
            t0 = time.perf_counter()
            budget = ram_budget_for(case)
            result = tune(pipeline, budget_s=budget_s, cache=cache_dir, ram_budget=budget,
                          window_s=window_s, seed=seed, progress=False)
            wall = time.perf_counter() - t0
            pick(name, result.config, result.tuning_seconds, result.history, budget=budget,
                 source=result.source, wall_seconds=round(wall, 2))
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)

    # Each search judged RSS against its own budget (status "oom"); a finished
    # measurement with status ok stayed inside the budget of its phase.
    within = float("inf")
    if long_budget_s > 0:
        outcome = run_search(env(), "hillclimb", budget_s=long_budget_s, seed=seed + 1,
                             start=_best_ok(every_measurement, within, RSS_MARGIN),
                             progress=False)
        every_measurement.extend(outcome.history)
    best = _best_ok(every_measurement, within, RSS_MARGIN)
    if best is not None:
        picks["best_found"] = {"config": best, "tuning_seconds": None,
                               "note": "best config any search measured (+ long hill-climb)"}

    final_env = env()
    budget_bytes = final_env.ram_budget
    log(f"  measuring {len(picks)} configs x {repeats} repeats, interleaved "
        f"(ram budget {budget_bytes / 2**30:.2f} GiB)")
    runs = interleaved(final_env.measure, {n: p["config"] for n, p in picks.items()}, repeats,
                       log=log)
    rows = {}
    for name, p in picks.items():
        ms = runs[name]
        rows[name] = {**p,
                      "throughput": summary([m["throughput"] for m in ms]),
                      "peak_rss_mib": summary([m["peak_rss"] / 2**20 for m in ms]),
                      "ram_violations": sum(1 for m in ms
                                            if m["peak_rss"] > budget_bytes * (1 + RSS_MARGIN)
                                            or m["status"] == "oom"),
                      "crashes": sum(1 for m in ms if m["status"] in ("error", "timeout")),
                      "statuses": [m["status"] for m in ms]}
    _ratios(rows)
    # Twice the repeats: the pass exists to tell configs apart that the first one could not.
    second = (second_pass(final_env.measure, picks, rows, 2 * repeats, log=log, seed=seed)
              if repeats > 1 else None)
    return {"case": case.name, "ref": case.ref, "kind": case.kind, "kwargs": case.kwargs,
            "knobs": list(space.names), "framework": pipeline.framework,
            "ram_budget_bytes": budget_bytes, "ram_headroom_mib": case.ram_headroom_mib,
            "budget_s": budget_s, "repeats": repeats,
            "window_s": window_s, "methods": rows, "second_pass": second}


def second_pass(measure, picks: dict, rows: dict, repeats: int, log=print, seed: int = 0) -> dict | None:
    """Re-measure the side-by-side run's winner against each searching method's config.

    The winner is the highest of several noisy medians, so in the run that picked it its
    figure reads high and every other method's share low (the winner's curse): on a 2-core
    machine whose windows spread 10-20%, configs that tie read 0.85-0.95 of "the best".
    A second interleaved pass, whose figures played no part in picking the winner, gives
    each method's share of it without that bias; a method can then read above 1.00.

    ``repeats`` rounds; each round measures every config once, back to back, so a method's
    share is the median over rounds of its throughput over the winner's in the same round
    (the machine's slow drift cancels), with a 90% bootstrap interval over rounds
    (``ratio_to_winner_2nd`` and ``ratio_to_winner_2nd_ci`` in the searching methods' rows).
    An interval that holds 1.00 means the pass cannot tell the method from the winner.
    """
    valid = {n: r["throughput"]["median"] for n, r in rows.items() if r["ram_violations"] == 0}
    if not valid:
        return None
    winner = max(valid, key=valid.get)
    searching = (*SEARCHED, "intune_cold")
    names = [n for n in searching if n in picks and n != winner]
    configs = {winner: picks[winner]["config"], **{n: picks[n]["config"] for n in names}}
    log(f"  second pass: {len(configs)} configs x {repeats} repeats against the winner {winner}")
    runs = interleaved(measure, configs, repeats, log=log)
    top = summary([m["throughput"] for m in runs[winner]])
    for n in names:
        ratio, ci = paired_ratio([m["throughput"] for m in runs[n]],
                                 [m["throughput"] for m in runs[winner]], seed=seed)
        rows[n]["ratio_to_winner_2nd"] = round(ratio, 3)
        rows[n]["ratio_to_winner_2nd_ci"] = [round(ci[0], 3), round(ci[1], 3)]
    if winner in searching:
        rows[winner]["ratio_to_winner_2nd"] = 1.0
    return {"winner": winner, "config": dict(picks[winner]["config"]), "throughput": top,
            "repeats": repeats}


def paired_ratio(values, reference, *, seed: int = 0, resamples: int = 2000,
                 level: float = 0.90) -> tuple[float, tuple[float, float]]:
    """Median of ``values[i] / reference[i]`` over rounds, with its bootstrap interval.

    A round whose reference read zero (a failed measurement) is left out; no rounds left
    reads 0.0 with the interval (0, 0).
    """
    import numpy as np

    pairs = np.array([v / r for v, r in zip(values, reference) if r > 0], dtype=float)
    if pairs.size == 0:
        return 0.0, (0.0, 0.0)
    rng = np.random.default_rng(seed)
    medians = np.median(rng.choice(pairs, size=(resamples, pairs.size), replace=True), axis=1)
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(medians, [tail, 100 - tail])
    return float(np.median(pairs)), (float(lo), float(hi))


def _best_ok(measurements, ram_budget, margin):
    ok = [m for m in measurements if m.status == STATUS_OK and m.peak_rss <= ram_budget * (1 + margin)]
    return dict(max(ok, key=lambda m: m.throughput).config) if ok else None


def _ratios(rows: dict) -> None:
    """Ratio of each method's median throughput to the best method's and to AUTOTUNE's."""
    valid = {n: r["throughput"]["median"] for n, r in rows.items() if r["ram_violations"] == 0}
    top = max(valid.values(), default=0.0) or 1.0
    auto = rows.get("autotune", {}).get("throughput", {}).get("median")
    for r in rows.values():
        med = r["throughput"]["median"]
        r["ratio_to_best"] = round(med / top, 3)
        r["ratio_to_autotune"] = round(med / auto, 3) if auto else None
