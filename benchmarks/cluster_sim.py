"""Scale-out in the simulator (InTuneX): the cluster agent vs the oracle and the rules people use.

    python -m benchmarks.cluster_sim              # 200 held-out jobs, ~15 min on 2 cores
    python -m benchmarks.cluster_sim --jobs 20    # a quick look, into results/quick/
    python -m benchmarks.cluster_sim --render     # re-render from cluster_sim.json

Jobs come from the cluster generator's "test" split, which pretraining never
sees (0-64 workers of 4-64 cores, demand 10^4-10^7 records/s). Every method runs
on its own :class:`SimClusterEnv` of the job with the same wall-clock budget
(start-ups, node tuning and measurement windows all count). The figure of merit
is the noise-free cost per million records of the (K, config) a method picks
over the exact oracle's. Writes benchmarks/results/cluster_sim.{json,md,png} and
refreshes the marked blocks in README.md and benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from .common import RESULTS, md_table, replace_block, write_json

ROOT = Path(__file__).resolve().parent.parent
READMES = (ROOT / "README.md", ROOT / "benchmarks" / "README.md")
START, END = "<!-- bench:cluster-sim:start -->", "<!-- bench:cluster-sim:end -->"
JOBS = 200
AGENT = "intunex"
RULES = ("scale_until_flat", "demand_match")
"""The rules the agent must beat by 15% on the jobs where their K differs from the oracle's."""
PLOT_JOBS = 4


def run(jobs: int = JOBS, methods=None, budget_s: float | None = None, seed: int = 0,
        log=print) -> dict:
    """Every method on ``jobs`` held-out jobs; rows of noise-free outcomes."""
    import torch
    torch.set_num_threads(1)
    from intune_flow.agent.policy_io import load_default_policy
    from intune_flow.scaleout.policy_io import cluster_policy_provenance, load_cluster_policy
    from intune_flow.scaleout.search import BUDGET_S, METHODS, run_scaleout
    from intune_flow.sim.cluster_env import SimClusterEnv
    from intune_flow.sim.cluster_generate import sample_job
    from intune_flow.sim.cluster_oracle import cluster_oracle, evaluate_pick

    methods = tuple(methods or METHODS)
    budget_s = float(budget_s or BUDGET_S)
    policy, node_policy = load_cluster_policy(), load_default_policy()
    rows, t0 = [], time.time()
    for i in range(jobs):
        job = sample_job("test", i)
        best = cluster_oracle(job)
        for method in methods:
            env = SimClusterEnv(job, seed=seed * 100_000 + i)
            t = time.time()
            out = run_scaleout(env, method, budget_s=budget_s, seed=seed + i,
                               policy_state=policy, node_policy=node_policy)
            got = evaluate_pick(job, out.workers, out.config)
            rows.append({"job": i, "method": method, "workers": out.workers,
                         "oracle_workers": best.workers,
                         "ratio": got.per_million / best.per_million,
                         "per_million": got.per_million, "oracle_per_million": best.per_million,
                         "limit": best.limit, "demand": job.demand,
                         "pick_minutes": out.pick_seconds / 60, "minutes": out.seconds / 60,
                         "dollars": out.dollars, "wall_s": time.time() - t})
        if (i + 1) % 20 == 0 or i + 1 == jobs:
            log(f"{i + 1}/{jobs} jobs ({time.time() - t0:.0f}s)")
    return {"rows": rows, "summary": summarize(rows, methods), "curves": curves(rows, jobs),
            "meta": {"jobs": jobs, "methods": list(methods), "budget_s": budget_s, "seed": seed,
                     "policy": cluster_policy_provenance(),
                     "command": "python -m benchmarks.cluster_sim" + (
                         f" --jobs {jobs}" if jobs != JOBS else ""),
                     "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                     "python": platform.python_version(), "wall_s": round(time.time() - t0, 1)}}


def _q(values, q) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def summarize(rows, methods) -> dict:
    """Per method: cost / oracle stats and search time; the agent paired with each method."""
    by = {(r["job"], r["method"]): r for r in rows}
    jobs = sorted({r["job"] for r in rows})
    per_method = []
    for m in methods:
        sel = [by[(j, m)] for j in jobs if (j, m) in by]
        ratio = [r["ratio"] for r in sel]
        per_method.append({
            "method": m, "n": len(sel), "median": _q(ratio, 50), "p10": _q(ratio, 10),
            "p90": _q(ratio, 90), "mean": float(np.mean(ratio)) if ratio else float("nan"),
            "share_within_5pct": float(np.mean([x <= 1.05 for x in ratio])) if ratio else 0.0,
            "share_oracle_k": float(np.mean([r["workers"] == r["oracle_workers"] for r in sel]))
            if sel else 0.0,
            "median_workers": _q([r["workers"] for r in sel], 50),
            "median_pick_minutes": _q([r["pick_minutes"] for r in sel], 50),
            "p90_pick_minutes": _q([r["pick_minutes"] for r in sel], 90),
            "median_minutes": _q([r["minutes"] for r in sel], 50)})
    paired = []
    if AGENT in methods:
        for m in methods:
            if m == AGENT:
                continue
            both = [(by[(j, AGENT)], by[(j, m)]) for j in jobs if (j, m) in by and (j, AGENT) in by]
            differ = [(a, b) for a, b in both if b["workers"] != b["oracle_workers"]]
            rel = [a["per_million"] / b["per_million"] for a, b in both]
            rel_d = [a["per_million"] / b["per_million"] for a, b in differ]
            paired.append({"method": m, "n": len(both), "median_agent_over_method": _q(rel, 50),
                           "n_differ": len(differ),
                           "median_agent_over_method_differ": _q(rel_d, 50),
                           "agent_cheaper_differ": 1 - _q(rel_d, 50) if rel_d else float("nan"),
                           "share_agent_not_worse": float(np.mean([x <= 1.0 + 1e-9 for x in rel]))
                           if rel else 0.0})
    return {"methods": per_method, "paired": paired}


def curves(rows, jobs: int) -> list[dict]:
    """Cost per million records at every K for a few jobs (oracle and AUTOTUNE configs), with
    each method's pick, for the plot."""
    from intune_flow.sim.cluster_generate import sample_job
    from intune_flow.sim.cluster_oracle import cost_curve
    oracle_k = {r["job"]: r["oracle_workers"] for r in rows}
    picked = sorted((j for j, k in oracle_k.items() if k >= 2), key=oracle_k.get)
    picked = picked or sorted(oracle_k)
    if len(picked) > PLOT_JOBS:
        picked = [picked[int(round(x))] for x in np.linspace(0, len(picked) - 1, PLOT_JOBS)]
    out = []
    for j in picked:
        job = sample_job("test", j)
        auto = (job.trainer_pipeline().space.autotune(), job.prefix.space.autotune())
        out.append({"job": j, "demand": job.demand,
                    "oracle_config": [p.per_million for p in cost_curve(job)],
                    "autotune_config": [p.per_million for p in cost_curve(job, configs=auto)],
                    "picks": {r["method"]: [r["workers"], r["per_million"]]
                              for r in rows if r["job"] == j}})
    return out


def render(data: dict) -> str:
    """The Markdown block (README and benchmarks/README.md): every figure from the JSON."""
    meta, summ = data["meta"], data["summary"]
    lines = [f"{meta['jobs']} held-out simulated jobs, a wall-clock budget of "
             f"{meta['budget_s'] / 60:.0f} min per search (worker start-ups, node tuning and "
             f"measurement windows included). Cost per million records of the pick over the "
             f"exact oracle's (lower is better; p10 is the best tenth, p90 the worst). "
             f"Command: `{meta['command']}` ({meta['date']}).", ""]
    lines.append(md_table(
        ["method", "median", "p10", "p90", "share <= 1.05x", "K = oracle's", "median K",
         "min to pick (median / p90)", "min searched"],
        [[s["method"], f"{s['median']:.3f}", f"{s['p10']:.3f}", f"{s['p90']:.2f}",
          f"{s['share_within_5pct']:.2f}", f"{s['share_oracle_k']:.2f}",
          f"{s['median_workers']:.0f}",
          f"{s['median_pick_minutes']:.1f} / {s['p90_pick_minutes']:.1f}",
          f"{s['median_minutes']:.1f}"] for s in summ["methods"]]))
    if summ["paired"]:
        lines += ["", f"The agent ({AGENT}) against each method on the same jobs: the median of "
                      "the agent's cost over the method's, on all jobs and on the jobs where the "
                      "method's K differs from the oracle's (below 1: the agent is cheaper).", ""]
        lines.append(md_table(
            ["method", "all jobs", "share agent not worse", "jobs where K differs",
             "on those", "agent cheaper there"],
            [[p["method"], f"{p['median_agent_over_method']:.3f}",
              f"{p['share_agent_not_worse']:.2f}", p["n_differ"],
              f"{p['median_agent_over_method_differ']:.3f}",
              f"{100 * p['agent_cheaper_differ']:.0f}%"] for p in summ["paired"]]))
    return "\n".join(lines) + "\n"


def plot(data: dict, path: Path) -> None:
    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cs = data["curves"]
    if not cs:
        return
    fig, axes = plt.subplots(1, len(cs), figsize=(4.2 * len(cs), 4), squeeze=False)
    markers = dict(zip(data["meta"]["methods"], "*osD^vPX<>"))
    for ax, c in zip(axes[0], cs):
        ks = np.arange(len(c["oracle_config"]))
        ax.plot(ks, c["oracle_config"], color="k", lw=1.2, label="oracle config per worker")
        ax.plot(ks, c["autotune_config"], color="0.6", lw=1, ls="--", label="AUTOTUNE per worker")
        for m, (k, cost) in c["picks"].items():
            ax.scatter([k], [cost], marker=markers.get(m, "o"), s=90 if m == AGENT else 40,
                       zorder=3, label=m)
        ax.set_yscale("log")
        ax.set_xlabel("workers K")
        oom = "" if any(np.isfinite(c["autotune_config"])) else "\n(AUTOTUNE passes the RAM budget)"
        ax.set_title(f"job {c['job']}, demand {c['demand']:,.0f} rec/s{oom}", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("$ per million records")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(6, len(labels)), fontsize=8)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(data: dict, out_dir: Path = RESULTS, readmes=READMES) -> None:
    """cluster_sim.{json,md,png} in ``out_dir``; the block in each of ``readmes``."""
    write_json("cluster_sim", data, out_dir)
    block = render(data)
    (out_dir / "cluster_sim.md").write_text("# Scale-out in the simulator\n\n" + block)
    plot(data, out_dir / "cluster_sim.png")
    for path in readmes:
        replace_block(Path(path), START, END, block)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=JOBS)
    ap.add_argument("--methods", nargs="*", default=None)
    ap.add_argument("--budget-s", type=float, default=None)
    ap.add_argument("--out-dir", default=None,
                    help="default results/ (README blocks refreshed); --jobs < 200: results/quick/")
    ap.add_argument("--render", action="store_true", help="only re-render from the JSON")
    args = ap.parse_args(argv)
    default = args.out_dir is None and args.jobs >= JOBS
    out_dir = Path(args.out_dir) if args.out_dir else (RESULTS if default else RESULTS / "quick")
    readmes = READMES if default else ()
    if args.render:
        write_outputs(json.loads((out_dir / "cluster_sim.json").read_text()), out_dir, readmes)
        return 0
    data = run(args.jobs, args.methods, args.budget_s)
    write_outputs(data, out_dir, readmes)
    print(render(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
