"""Sample efficiency in the simulator: intune, random search and Optuna at 10, 20 and 40
measurements per search, at the simulator's own noise and at real-probe noise.

The 40-measurement table (``python -m benchmarks.sim_bench``) is where black-box search
has had time to catch up; a tuner earns its place by getting there in fewer measurements,
and on real machines every measurement is seconds of the trainer's time. The second noise
level, a lognormal sigma of 0.10, is about what 2-3 s probe windows read on a shared
2-core machine (the real-pipeline runs see 10-20% spreads).

    python -m benchmarks.sim_budgets                 # 50 pipelines x 8-128 cores, ~13 min
    python -m benchmarks.sim_budgets --pipelines 10  # a quick look, into results/quick/
    python -m benchmarks.sim_budgets --render        # re-render from sim_budgets.json

Each cell: median (p10) over all machines of the returned config's noise-free throughput
over the oracle's, then the share of searches ending at >= 95% of the oracle, and the
median measurements a search used (intune stops on its own when it converges). The
``_tfdata`` rows run on a simulated tf.data, where a knob may be handed to AUTOTUNE.
Writes benchmarks/results/sim_budgets.{json,md,png} and refreshes the table in
benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from .common import RESULTS, md_table, replace_block, write_json
from .sim_bench import CORES

METHODS = ("intune", "random", "optuna", "intune_tfdata", "optuna_tfdata")
"""``_tfdata``: on a simulated tf.data, where AUTOTUNE is a value per knob (sim_bench's TFDATA)."""
BUDGETS = (10, 20, 40)
NOISES = (None, 0.10)
BENCH_README = Path(__file__).resolve().parent / "README.md"
START, END = "<!-- sim-budgets:start -->", "<!-- sim-budgets:end -->"


def run(pipelines: int, budgets=BUDGETS, noises=NOISES, methods=METHODS, cores=CORES,
        log=print) -> dict:
    from . import sim_bench
    cells = []
    t0 = time.time()
    for noise in noises:
        for steps in budgets:
            data = sim_bench.run(pipelines, tuple(cores), tuple(methods), steps=steps,
                                 noise=noise, log=lambda *a: None)
            for method in methods:
                rows = [r for r in data["rows"] if r["method"] == method]
                cells.append({"noise": noise, "steps": steps, "method": method,
                              "n": len(rows), **sim_bench.ratio_stats([r["ratio"] for r in rows]),
                              "median_steps_used": float(np.median([r["steps"] for r in rows]))})
            log(f"noise {_noise_label(noise)}, {steps} measurements done "
                f"({time.time() - t0:.0f}s)")
    return {"cells": cells, "meta": {
        "pipelines_per_core_count": pipelines, "cores": list(cores), "budgets": list(budgets),
        "noises": list(noises), "methods": list(methods),
        "command": "python -m benchmarks.sim_budgets" + (
            f" --pipelines {pipelines}" if pipelines != 50 else ""),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "wall_s": round(time.time() - t0, 1)}}


def _noise_label(noise) -> str:
    return "the simulator's own (sigma 0.01-0.04)" if noise is None else f"sigma {noise:.2f}"


def render(data: dict) -> str:
    meta = data["meta"]
    get = {(c["noise"], c["steps"], c["method"]): c for c in data["cells"]}
    out = [f"Returned config / oracle, median (p10), share of searches >= 95% of the oracle, "
           f"median measurements used; {meta['pipelines_per_core_count']} held-out pipelines "
           f"on each of {', '.join(map(str, meta['cores']))} cores. Command: "
           f"`{meta['command']}` ({meta['date']}).", ""]
    for noise in meta["noises"]:
        rows = []
        for steps in meta["budgets"]:
            row = [steps]
            for m in meta["methods"]:
                c = get[(noise, steps, m)]
                row.append(f"{c['median']:.3f} ({c['p10']:.2f}), {c['share_ge_95']:.2f}, "
                           f"{c['median_steps_used']:.0f}")
            rows.append(row)
        out += [f"Noise: {_noise_label(noise)}", "",
                md_table(["measurements", *meta["methods"]], rows), ""]
    return "\n".join(out)


def plot(data: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    meta = data["meta"]
    get = {(c["noise"], c["steps"], c["method"]): c for c in data["cells"]}
    fig, axes = plt.subplots(1, len(meta["noises"]), figsize=(5 * len(meta["noises"]), 3.8),
                             squeeze=False)
    for ax, noise in zip(axes[0], meta["noises"]):
        for m in meta["methods"]:
            ax.plot(meta["budgets"], [get[(noise, s, m)]["median"] for s in meta["budgets"]],
                    marker="o", label=f"{m} median")
            ax.plot(meta["budgets"], [get[(noise, s, m)]["p10"] for s in meta["budgets"]],
                    marker=".", ls=":", color=ax.lines[-1].get_color(), label=f"{m} p10")
        ax.set_xlabel("measurements per search")
        ax.set_ylabel("throughput / oracle")
        ax.set_ylim(0, 1.02)
        ax.set_title(f"noise: {_noise_label(noise)}", fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(data: dict, out_dir: Path, update_readme: bool) -> None:
    write_json("sim_budgets", data, out_dir)
    table = render(data)
    (out_dir / "sim_budgets.md").write_text("# Sample efficiency in the simulator\n\n" + table)
    plot(data, out_dir / "sim_budgets.png")
    if update_readme:
        replace_block(BENCH_README, START, END, table)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pipelines", type=int, default=50, help="per core count (default 50)")
    ap.add_argument("--render", action="store_true",
                    help="only rewrite the table, plot and README block from sim_budgets.json")
    args = ap.parse_args(argv)
    if args.pipelines < 1:
        ap.error("--pipelines must be at least 1")
    full = args.pipelines == 50
    out_dir = RESULTS if full else RESULTS / "quick"
    if args.render:
        import json
        write_outputs(json.loads((out_dir / "sim_budgets.json").read_text()), out_dir,
                      update_readme=full)
        return 0
    data = run(args.pipelines)
    write_outputs(data, out_dir, update_readme=full)
    print(render(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
