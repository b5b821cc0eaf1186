"""Simulated machines (8-128 cores): every method vs the exact oracle on held-out pipelines.

    python -m benchmarks.sim_bench            # full: 50 pipelines per core count
    python -m benchmarks.sim_bench --quick    # 10 per core count, into results/quick/
    python -m benchmarks.sim_bench --render   # rewrite sim.md and the doc table from sim.json

Pipelines come from the simulator's "eval" seed stream, which pretraining never
uses. Each search method gets the same budget of 40 measurements after the start
config; the figure of merit is the noise-free throughput of the config it returns
divided by the oracle's (the exact best under the CPU and RAM budgets).
The ``intune_nosignals`` row runs the same agent on probes without per-stage
utilization signals, as real tf.data/torchdata probes are today; ``_tfdata`` rows run on
a simulated tf.data, where a knob may be handed to AUTOTUNE (:data:`TFDATA`).
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

from .common import RESULTS, replace_block

DOC = Path(__file__).resolve().parent.parent / "docs" / "tuner.md"
CORES = (8, 16, 32, 64, 128)
METHODS = ("intune", "intune_nosignals", "intune_tfdata", "autotune", "heuristic", "hillclimb",
           "random", "random_tfdata", "optuna", "optuna_tfdata", "ones")
STEPS = 40
NO_SIGNALS = "_nosignals"
"""Suffix of a row whose probes report no per-stage signals, as on real pipelines today."""
TFDATA = "_tfdata"
"""Suffix of a row on a simulated tf.data (``SimEnv(native_autotune=True)``): AUTOTUNE is a
value per knob, set by AUTOTUNE's hill-climb around the others, for intune (its AUTOTUNE
floor, the agent's AUTOTUNE move, the hybrid) and for the baselines' samples."""
VARIANT = ":"
"""``intune:uniform`` runs intune's ablation variant ``uniform`` (``run_search(variant=)``)."""


def split_method(name: str) -> tuple[str, str]:
    """(search method, intune variant) of a row name such as ``intune:uniform_tfdata``."""
    method, _, variant = name.replace(NO_SIGNALS, "").replace(TFDATA, "").partition(VARIANT)
    return method, variant or "shipped"


def env_options(name: str) -> dict:
    """The :class:`~intune_flow.sim.SimEnv` options a row name asks for (its suffixes)."""
    return {"signals": NO_SIGNALS not in name, "native_autotune": TFDATA in name}


def run(pipelines: int, cores_list=CORES, methods=METHODS, steps: int = STEPS, seed: int = 0,
        log=print, noise: float | None = None, split: str = "eval", first: int = 0,
        policy: dict | None = None) -> dict:
    """Every method on held-out pipelines ``first`` .. ``first + pipelines - 1`` of the
    simulator's ``split`` seed stream; ``noise`` replaces each pipeline's own measurement
    noise (a lognormal sigma) when given; ``policy`` replaces the shipped policy."""
    import dataclasses

    import torch
    torch.set_num_threads(1)
    from intune_flow.agent.policy_io import default_policy_provenance, load_default_policy
    from intune_flow.search import run_search
    from intune_flow.sim import SimEnv, oracle, sample_pipeline

    shipped = policy is None
    if shipped:
        policy = load_default_policy()
    rows = []
    t0 = time.time()
    for cores in cores_list:
        for i in range(first, first + pipelines):
            pipe = sample_pipeline(split, i, cores=cores)
            if noise is not None:
                pipe = dataclasses.replace(pipe, noise=noise)
            probe = SimEnv(pipe, seed=0)
            _, best = oracle(probe)
            start_x = probe.true_throughput(probe.space.defaults())
            for method in methods:
                env = SimEnv(pipe, seed=seed * 1000 + i, **env_options(method))
                t = time.time()
                search, variant = split_method(method)
                out = run_search(env, search, budget_s=1e12, variant=variant,
                                 max_steps=steps, seed=seed + i, progress=False,
                                 policy_state=policy, learn=True)
                x = env.true_throughput(out.best.config)
                reached = steps_to(out.history, env, 0.95 * best) if best > 0 else 0
                rows.append({
                    "cores": cores, "pipeline": i, "method": method,
                    "knobs": len(pipe.space), "stages": len(pipe.stages),
                    "ratio": x / best if best > 0 else 1.0,
                    "start_ratio": start_x / best if best > 0 else 1.0,
                    "steps": out.steps, "sim_seconds": out.seconds, "steps_to_95": reached,
                    "ooms": sum(m.status == "oom" for m in out.history),
                    "stopped": out.stopped, "wall_s": time.time() - t,
                })
        log(f"{cores:>4} cores done ({time.time() - t0:.0f}s)")
    return {"rows": rows, "summary": summarize(rows), "meta": {
        "pipelines_per_core_count": pipelines, "steps": steps, "seed": seed, "noise": noise,
        "cores": list(cores_list), "methods": list(methods),
        "policy": default_policy_provenance() if shipped else "given to run()",
        "split": split, "first_pipeline": first,
        "command": "python -m benchmarks.sim_bench" + (" --quick" if pipelines < 50 else ""),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": platform.python_version(), "wall_s": round(time.time() - t0, 1)}}


def steps_to(history, env, target: float) -> int | None:
    """Measurements after the start until the best-measured config so far truly reaches ``target``."""
    best_m, best_x = None, -1.0
    for i, m in enumerate(history):
        if m.ok and m.throughput > best_x:
            best_m, best_x = m, m.throughput
        if best_m is not None and env.true_throughput(best_m.config) >= target:
            return i
    return None


def ratio_stats(ratio) -> dict:
    """Median, p10, mean and share >= 95% of throughput/oracle ratios."""
    ratio = np.asarray(ratio, dtype=float)
    return {"median": float(np.median(ratio)), "p10": float(np.percentile(ratio, 10)),
            "mean": float(ratio.mean()), "share_ge_95": float((ratio >= 0.95).mean())}


def summarize(rows) -> list[dict]:
    out = []
    keys = sorted({(r["cores"], r["method"]) for r in rows})
    for cores, method in keys:
        sel = [r for r in rows if r["cores"] == cores and r["method"] == method]
        ratio = np.array([r["ratio"] for r in sel])
        auto = {r["pipeline"]: r["ratio"] for r in rows
                if r["cores"] == cores and r["method"] == "autotune"}
        vs_auto = [r["ratio"] / auto[r["pipeline"]] for r in sel
                   if auto.get(r["pipeline"], 0) > 0]
        out.append({
            "cores": cores, "method": method, "n": len(sel), **ratio_stats(ratio),
            "median_vs_autotune": float(np.median(vs_auto)) if vs_auto else None,
            "median_steps": float(np.median([r["steps"] for r in sel])),
            "median_sim_seconds": float(np.median([r["sim_seconds"] for r in sel])),
            "ooms": int(sum(r["ooms"] for r in sel)),
            "share_reached_95": float(np.mean([r["steps_to_95"] is not None for r in sel])),
            "median_steps_to_95": (float(np.median([r["steps_to_95"] for r in sel
                                                    if r["steps_to_95"] is not None]))
                                   if any(r["steps_to_95"] is not None for r in sel) else None),
        })
    return out


def render(data: dict) -> str:
    """The Markdown table (headline: median and p10 of throughput/oracle per core count)."""
    summ = data["summary"]
    meta = data["meta"]
    cores = sorted({s["cores"] for s in summ})
    methods = [m for m in meta["methods"] if any(s["method"] == m for s in summ)]
    get = {(s["cores"], s["method"]): s for s in summ}
    lines = [f"Throughput of the returned config / oracle, median (p10), over "
             f"{meta['pipelines_per_core_count']} held-out simulated pipelines per machine, "
             f"{meta['steps']} measurements per search. Command: `{meta['command']}` "
             f"({meta['date']}).", "",
             "| method | " + " | ".join(f"{c} cores" for c in cores) + " |",
             "|---|" + "---|" * len(cores)]
    for m in methods:
        cells = [f"{get[(c, m)]['median']:.3f} ({get[(c, m)]['p10']:.2f})" for c in cores]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    lines += ["", "Over all machines: measurements after the start, simulated seconds, OOM "
                  "measurements (the start's included: the default start, parallelism = cores, "
                  "does not fit on memory-tight pipelines), the median of the per-pipeline ratio "
                  "to the AUTOTUNE row, the mean of throughput/oracle, the share of searches "
                  "ending at >= 95% of the oracle, and the measurements it took to first hold "
                  "such a config (median over the searches that got there). Every method keeps "
                  "its start config if nothing it measures beats it, so single-config rows "
                  "(ones, autotune, heuristic) read as the better of the start and that config.",
              "",
              "| method | median steps | median simulated s | OOM measurements | "
              "median ratio to AUTOTUNE | mean of ratios | share >= 95% of oracle | "
              "median steps to 95% |", "|---|---|---|---|---|---|---|---|"]
    for m in methods:
        sel = [get[(c, m)] for c in cores]
        va = [s["median_vs_autotune"] for s in sel if s["median_vs_autotune"] is not None]
        va = [v for v in va if v == v]
        lines.append(f"| {m} | {np.median([s['median_steps'] for s in sel]):.0f} | "
                     f"{np.median([s['median_sim_seconds'] for s in sel]):.1f} | "
                     f"{sum(s['ooms'] for s in sel)} | "
                     f"{np.median(va) if va else float('nan'):.2f} | "
                     f"{np.mean([s['mean'] for s in sel]):.3f} | "
                     f"{np.mean([s['share_ge_95'] for s in sel]):.2f} | "
                     f"{_steps95(sel)} |")
    return "\n".join(lines) + "\n"


def _steps95(sel) -> str:
    vals = [s["median_steps_to_95"] for s in sel if s.get("median_steps_to_95") is not None]
    return f"{np.median(vals):.0f}" if vals else "-"


def plot(data: dict, path: Path) -> None:
    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    summ = data["summary"]
    cores = sorted({s["cores"] for s in summ})
    methods = [m for m in data["meta"]["methods"] if any(s["method"] == m for s in summ)]
    get = {(s["cores"], s["method"]): s for s in summ}
    fig, ax = plt.subplots(figsize=(9, 4.5))
    w = 0.8 / len(methods)
    for j, m in enumerate(methods):
        xs = np.arange(len(cores)) + j * w
        ax.bar(xs, [get[(c, m)]["median"] for c in cores], w, label=m)
    ax.set_xticks(np.arange(len(cores)) + 0.4 - w / 2, [f"{c} cores" for c in cores])
    ax.set_ylabel("median throughput / oracle")
    ax.set_ylim(0, 1.05)
    ax.axhline(0.95, color="k", lw=0.8, ls="--")
    ax.legend(ncol=len(methods), fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1))
    ax.set_title(f"simulated machines, {data['meta']['steps']} measurements per search")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(data: dict, out_dir: Path = RESULTS, update_doc: bool = True) -> None:
    """sim.md and sim.png next to the JSON; for the default results also the doc table and
    benchmarks/README's results block, which shows sim.md."""
    out_dir.mkdir(parents=True, exist_ok=True)
    table = render(data)
    (out_dir / "sim.md").write_text("# Simulated machines\n\n" + table)
    plot(data, out_dir / "sim.png")
    if update_doc:
        replace_block(DOC, "<!-- sim-table:start -->", "<!-- sim-table:end -->", table)
        from . import report
        report.write_all()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="10 pipelines per core count")
    ap.add_argument("--pipelines", type=int, default=None)
    ap.add_argument("--cores", type=int, nargs="*", default=list(CORES))
    ap.add_argument("--methods", nargs="*", default=list(METHODS))
    ap.add_argument("--render", action="store_true", help="only re-render from sim.json")
    ap.add_argument("--out", default=None,
                    help="JSON path, or a directory to write sim.json into (default "
                         "results/sim.json; --quick: results/quick/sim.json)")
    args = ap.parse_args(argv)
    out = Path(args.out or (RESULTS / "quick" / "sim.json" if args.quick else RESULTS / "sim.json"))
    if out.is_dir() or out.suffix != ".json":
        out = out / "sim.json"  # like the other benchmarks' --out, which name a directory
    default = out.resolve() == (RESULTS / "sim.json").resolve()
    if args.render:
        write_outputs(json.loads(out.read_text()), out.parent, update_doc=default)
        return 0
    n = args.pipelines or (10 if args.quick else 50)
    data = run(n, tuple(args.cores), tuple(args.methods))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n")
    write_outputs(data, out.parent, update_doc=default)
    print(render(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
