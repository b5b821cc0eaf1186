"""Nightly retraining economics: a week of real nights with the cache vs. without.

Eight nights of the same job on this machine. Night 4 runs on a smaller machine class
(CPU affinity cut to half the cores), night 6 on a changed schema (a pipeline with an extra
feature). Three policies, same nights: intune with its cache, intune tuning cold every night,
and AUTOTUNE every night. Reported: total tuning seconds and mean delivered throughput.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager

from .common import summary

BASE = "examples.criteo:criteo_pipeline"
CHANGED_SCHEMA = "examples.criteo_memory:criteo_memory_pipeline"


def nights(n: int = 8) -> list[dict]:
    plan = []
    for night in range(1, n + 1):
        plan.append({"night": night,
                     "ref": CHANGED_SCHEMA if night == 6 else BASE,
                     "kwargs": {"latency_ms": 0.0, "batch_size": 2048} if night == 6 else {},
                     "small_machine": night == 4})
    return plan


@contextmanager
def _affinity(small: bool):
    before = os.sched_getaffinity(0)
    if small and len(before) > 1:
        os.sched_setaffinity(0, set(sorted(before)[: max(1, len(before) // 2)]))
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def run(*, budget_s: float, window_s: float, n_nights: int = 8, log=print) -> dict:
    from intune_flow import tune
    from intune_flow.probe import probe
    from intune_flow.pipeline import Pipeline

    plan = nights(n_nights)
    cache_dir = tempfile.mkdtemp(prefix="intune-bench-nightly-")
    rows = []
    try:
        for night in plan:
            pipe = Pipeline.load(night["ref"], **night["kwargs"])
            row = {**{k: night[k] for k in ("night", "ref", "small_machine")}}
            with _affinity(night["small_machine"]):
                for policy, cache in (("intune_cached", cache_dir), ("intune_cold", None)):
                    cold_dir = None if cache else tempfile.mkdtemp(prefix="intune-bench-cold-")
                    try:
                        r = tune(pipe, budget_s=budget_s, cache=cache or cold_dir,
                                 window_s=window_s, progress=False)
                    finally:
                        if cold_dir:
                            shutil.rmtree(cold_dir, ignore_errors=True)
                    row[policy] = {"source": r.source, "tuning_seconds": round(r.tuning_seconds, 2),
                                   "config": r.config}
                if pipe.framework == "tf.data":
                    auto = pipe.space.autotune()
                    row["autotune"] = {"source": "autotune", "tuning_seconds": 0.0, "config": auto}
                # delivered throughput: each policy's config measured back to back, same night
                for policy in ("intune_cached", "intune_cold", "autotune"):
                    if policy in row:
                        m = probe(pipe, row[policy]["config"], window_s=window_s, warmup_s=0.3)
                        row[policy]["throughput"] = m.throughput
            log(f"  night {night['night']}: " + ", ".join(
                f"{p} {row[p]['source']} {row[p]['tuning_seconds']:.1f}s "
                f"{row[p]['throughput']:,.0f} rec/s" for p in ("intune_cached", "intune_cold", "autotune")
                if p in row))
            rows.append(row)
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
    totals = {}
    for policy in ("intune_cached", "intune_cold", "autotune"):
        present = [r[policy] for r in rows if policy in r]
        totals[policy] = {"tuning_seconds": round(sum(p["tuning_seconds"] for p in present), 2),
                          "throughput": summary([p["throughput"] for p in present]),
                          "nights": len(present)}
    return {"nights": rows, "totals": totals, "budget_s": budget_s, "window_s": window_s}
