"""Sample efficiency on real pipelines: intune vs random search and Optuna at short budgets.

The 60 s comparison (``python -m benchmarks --full --only real``) runs each search once, and
at 60 s on 2 cores the three searches end within each other's noise. Short budgets are where
a tuner's sample efficiency shows, and where the product spends its time (a warm night
refines or transfers on a quarter of the budget). Here every method searches ``--seeds``
times from scratch at each budget (a fresh env, its own seed), then every config found is
measured side by side (interleaved repeats; a config found twice is measured once).

    python -m benchmarks.budget_sweep --cases cpu,latency,memory --budgets 10,20 --seeds 3

Reported per case, budget and method: the median over seeds (and the worst seed) of the
found config's median throughput, as a share of the best median of any config measured in
that case. Writes benchmarks/results/budget_sweep.{json,md,png}.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from .common import RESULTS, interleaved, machine, md_table, summary, write_json

METHODS = ("intune", "random", "optuna")


def run_case(case, *, budgets, seeds: int, repeats: int, window_s: float, log=print) -> dict:
    """Search ``seeds`` times per method and budget, then measure every found config."""
    from intune_flow.agent.walk import config_key
    from intune_flow.pipeline import Pipeline
    from intune_flow.probe import probe
    from intune_flow.real_env import PipelineEnv
    from intune_flow.search import run_search

    from .real_pipelines import ram_budget_for

    pipeline = Pipeline.load(case.ref, **case.kwargs)
    if case.ram_headroom_mib:
        probe(pipeline, pipeline.space.ones(), window_s=0.5, warmup_s=0.2)  # settle RSS first

    def env():
        return PipelineEnv(pipeline, ram_budget=ram_budget_for(case), window_s=window_s,
                           warmup_s=0.3)

    searches = []
    for budget in budgets:
        for seed in range(seeds):
            for method in METHODS:
                outcome = run_search(env(), method, budget_s=budget, seed=seed, progress=False)
                config = dict(outcome.best.config)
                searches.append({"method": method, "budget_s": budget, "seed": seed,
                                 "config": config, "measurements": len(outcome.history),
                                 "seconds": round(outcome.seconds, 2)})
                log(f"[{case.name}] {budget:g} s seed {seed} {method:<7} -> {config} "
                    f"({len(outcome.history)} measurements)")
    distinct = {}
    for s in searches:
        distinct.setdefault(config_key(s["config"]), s["config"])
    auto_key = None
    if pipeline.framework == "tf.data":
        auto_key = config_key(pipeline.space.autotune())
        distinct.setdefault(auto_key, pipeline.space.autotune())
    names = {key: f"c{i}" for i, key in enumerate(distinct)}
    log(f"[{case.name}] measuring {len(distinct)} distinct configs x {repeats}, interleaved")
    runs = interleaved(env().measure, {names[k]: c for k, c in distinct.items()}, repeats,
                       log=lambda *a: None)
    medians = {name: statistics.median(m["throughput"] if m["status"] == "ok" else 0.0
                                       for m in ms) for name, ms in runs.items()}
    top = max(medians.values()) or 1.0
    for s in searches:
        s["share"] = round(medians[names[config_key(s["config"])]] / top, 3)
    auto = medians[names[auto_key]] if auto_key is not None else None
    cells = {}
    for budget in budgets:
        for method in METHODS:
            shares = [s["share"] for s in searches
                      if s["budget_s"] == budget and s["method"] == method]
            cells[f"{method}@{budget:g}"] = summary(shares)
    return {"case": case.name, "ref": case.ref, "kind": case.kind, "budgets": list(budgets),
            "seeds": seeds, "repeats": repeats, "window_s": window_s, "top": top,
            "autotune_share": round(auto / top, 3) if auto else None,
            "cells": cells, "searches": searches,
            "configs": {names[k]: c for k, c in distinct.items()}, "medians": medians}


def table(report: dict) -> str:
    """One Markdown table: a row per case and budget, a column per method."""
    rows = []
    for case in report["cases"]:
        for budget in case["budgets"]:
            row = [case["case"], f"{budget:g} s"]
            for method in METHODS:
                c = case["cells"][f"{method}@{budget:g}"]
                row.append(f"{c['median']:.2f} (worst {c['min']:.2f})")
            row.append("-" if case["autotune_share"] is None else f"{case['autotune_share']:.2f}")
            rows.append(row)
    return md_table(["case", "budget", *METHODS, "AUTOTUNE"], rows)


def plot(report: dict, path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = report["cases"]
    fig, axes = plt.subplots(1, len(cases), figsize=(4.2 * len(cases), 3.4), squeeze=False)
    for ax, case in zip(axes[0], cases):
        budgets = case["budgets"]
        for i, method in enumerate(METHODS):
            cells = [case["cells"][f"{method}@{b:g}"] for b in budgets]
            xs = [b * (1 + 0.04 * (i - 1)) for b in budgets]
            med = [c["median"] for c in cells]
            ax.errorbar(xs, med, yerr=[[m - c["min"] for m, c in zip(med, cells)],
                                       [c["max"] - m for m, c in zip(med, cells)]],
                        marker="o", capsize=3, label=method)
        if case["autotune_share"] is not None:
            ax.axhline(case["autotune_share"], color="grey", ls=":", label="AUTOTUNE")
        ax.set_title(case["case"])
        ax.set_xlabel("search budget (s)")
        ax.set_ylim(0, 1.05)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("share of the best config (median over seeds)")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    from .real_pipelines import CASES

    ap = argparse.ArgumentParser(prog="python -m benchmarks.budget_sweep",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default="cpu,latency,memory")
    ap.add_argument("--budgets", default="10,20", help="search budgets in seconds")
    ap.add_argument("--seeds", type=int, default=3, help="searches per method and budget")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats per config")
    ap.add_argument("--window-s", type=float, default=1.5)
    ap.add_argument("--out", default="budget_sweep", help="result file stem under results/")
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.cases.split(",") if n.strip()]
    unknown = sorted(set(names) - set(CASES))
    if unknown:
        ap.error(f"unknown case(s) {unknown}; choose from {sorted(CASES)}")
    try:
        budgets = [float(b) for b in args.budgets.split(",") if b.strip()]
    except ValueError:
        ap.error(f"--budgets takes seconds separated by commas, e.g. 10,20; got {args.budgets!r}")
    if not budgets or min(budgets) <= 0 or args.seeds < 1 or args.repeats < 1:
        ap.error("budgets must be positive; --seeds and --repeats at least 1")
    report = {"benchmark": "budget_sweep", "machine": machine(),
              "command": "python -m benchmarks.budget_sweep " + " ".join(
                  argv if argv is not None else sys.argv[1:]),
              "cases": [run_case(CASES[n], budgets=budgets, seeds=args.seeds,
                                 repeats=args.repeats, window_s=args.window_s) for n in names]}
    path = write_json(args.out, report)
    md = (f"Reproduce: `{report['command']}`\n\n"
          "Share of the best config measured in the case (median over seeds, worst seed):\n\n"
          + table(report) + "\n")
    (RESULTS / f"{args.out}.md").write_text(md)
    plot(report, RESULTS / f"{args.out}.png")
    print(md)
    print(f"-> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
