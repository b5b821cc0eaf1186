"""Policy ablation: what the RL policy and the heuristics around it each contribute.

    python -m benchmarks.ablation            # full: 20 sim pipelines x 2 machines, 4 real cases
    python -m benchmarks.ablation --quick    # 10 sim pipelines, one real case; into results/quick/
    python -m benchmarks.ablation --no-real  # the simulator only (about 3 minutes)

Variants of the same search (``run_search(..., variant=)``, :data:`intune_flow.search.VARIANTS`):

* ``intune`` (a): as shipped;
* ``intune:uniform`` (b): the policy's choices replaced by a uniform choice among the legal
  single-knob moves, the smart start, AUTOTUNE floor and hybrids kept;
* ``intune:bare`` (c): the policy alone, without the smart start, AUTOTUNE floor and hybrids;
* ``random`` and ``optuna`` (d): black-box search on the same budget;
* (a) and (b) once more on a simulated tf.data (:data:`TFDATA_METHODS`), where handing a knob
  to AUTOTUNE is one more move.

Simulator: held-out pipelines (the "eval" seed stream) on 16 and 64 cores at the simulator's
own noise; each cell is the median (p10) over searches of the returned config's noise-free
throughput over the oracle's, at 10, 20 and 40 measurements. Real: each reference pipeline
searched by every variant at 20 s and 60 s, every returned config then measured side by side,
interleaved; each cell is that config's median over repeats as a share of the best median of
the case. Writes benchmarks/results/ablation.{json,md,png} and refreshes the README block.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from . import common
from .common import RESULTS, interleaved, machine, md_table, summary

METHODS = ("intune", "intune:uniform", "intune:bare", "random", "optuna")
TFDATA_METHODS = ("intune_tfdata", "intune:uniform_tfdata")
"""(a) and (b) on a simulated tf.data, where handing a knob to AUTOTUNE is one more move
(simulator only: a real pipeline's framework decides)."""
LABELS = {"intune": "(a) intune", "intune:uniform": "(b) uniform moves",
          "intune:bare": "(c) policy, no heuristics", "random": "(d) random",
          "optuna": "(d) optuna", "intune_tfdata": "(a) intune, tf.data",
          "intune:uniform_tfdata": "(b) uniform moves, tf.data"}
README = Path(__file__).resolve().parent.parent / "README.md"
START, END = "<!-- ablation:start -->", "<!-- ablation:end -->"
MODES = {
    "quick": {"pipelines": 10, "cores": (16, 64), "steps": (10, 20, 40),
              "cases": ("cpu",), "budgets": (20.0, 60.0), "repeats": 3},
    "full": {"pipelines": 20, "cores": (16, 64), "steps": (10, 20, 40),
             "cases": ("cpu", "latency", "memory", "torch"), "budgets": (20.0, 60.0),
             "repeats": 5},
}


def run_sim(pipelines: int, cores, steps_list, methods=METHODS, log=print) -> list[dict]:
    """One cell per (measurements, method): ratio stats over every held-out search."""
    from . import sim_bench
    cells = []
    t0 = time.time()
    for steps in steps_list:
        data = sim_bench.run(pipelines, tuple(cores), tuple(methods), steps=steps,
                             log=lambda *a: None)
        for method in methods:
            ratios = [r["ratio"] for r in data["rows"] if r["method"] == method]
            cells.append({"steps": steps, "method": method, "n": len(ratios),
                          **sim_bench.ratio_stats(ratios)})
        log(f"[ablation] sim, {steps} measurements done ({time.time() - t0:.0f}s)")
    return cells


def run_real(case, budgets, repeats: int, methods=METHODS, seed: int = 0,
             log=print) -> dict:
    """Every variant searches one reference pipeline (a :data:`~benchmarks.real_pipelines.CASES`
    name or a :class:`~benchmarks.real_pipelines.Case`) at each budget; then all the returned
    configs are measured side by side, interleaved, ``repeats`` times."""
    from intune_flow.pipeline import Pipeline
    from intune_flow.real_env import PipelineEnv
    from intune_flow.search import run_search
    from intune_flow.tune import search_window

    from .real_pipelines import CASES, ram_budget_for
    from .sim_bench import split_method

    case = CASES[case] if isinstance(case, str) else case
    case_name = case.name
    pipeline = Pipeline.load(case.ref, **case.kwargs)
    picks = {}
    for budget in budgets:
        for method in methods:
            search, variant = split_method(method)
            env = PipelineEnv(pipeline, ram_budget=ram_budget_for(case),
                              window_s=search_window(budget), warmup_s=0.3)
            out = run_search(env, search, variant=variant, budget_s=budget, seed=seed,
                             progress=False)
            picks[f"{method}@{budget:g}"] = {"method": method, "budget_s": budget,
                                             "config": dict(out.best.config),
                                             "measurements": len(out.history),
                                             "seconds": round(out.seconds, 1)}
            log(f"[ablation] {case_name} {method} {budget:g}s -> {out.best.config}")
    final = PipelineEnv(pipeline, ram_budget=ram_budget_for(case), window_s=search_window(60),
                        warmup_s=0.3)
    runs = interleaved(final.measure, {n: p["config"] for n, p in picks.items()}, repeats,
                       log=log)
    for name, p in picks.items():
        ok = [m["throughput"] if m["status"] == "ok" else 0.0 for m in runs[name]]
        p["throughput"] = summary(ok)
    top = max(p["throughput"]["median"] for p in picks.values()) or 1.0
    for p in picks.values():
        p["ratio_to_best"] = p["throughput"]["median"] / top
    return {"case": case_name, "ref": case.ref, "repeats": repeats, "picks": picks}


def render(data: dict) -> str:
    meta = data["meta"]
    get = {(c["steps"], c["method"]): c for c in data["sim"]}
    methods = meta["methods"]

    def sim_table(names) -> str:
        rows = [[steps, *(f"{get[(steps, m)]['median']:.3f} ({get[(steps, m)]['p10']:.3f})"
                          for m in names)] for steps in meta["steps"]]
        return md_table(["measurements", *(LABELS[m] for m in names)], rows)

    out = [f"**Policy ablation** (`{meta['command']}`, {meta['machine']['date']}). Simulator: "
           f"returned config / oracle, median (p10), {meta['pipelines']} held-out pipelines on "
           f"each of {', '.join(map(str, meta['cores']))} cores, the simulator's own noise.", "",
           sim_table(methods), ""]
    tfdata = [m for m in TFDATA_METHODS if any(c["method"] == m for c in data["sim"])]
    if tfdata:
        out += ["The same pipelines on a simulated tf.data, where the agent may hand a knob to "
                "AUTOTUNE (one more move per knob, for the policy and for the uniform choice):",
                "", sim_table(tfdata), ""]
    if data["real"]:
        out += [f"Real reference pipelines on {meta['machine']['usable_cpus']} usable cores: "
                f"each variant's config, median of {data['real'][0]['repeats']} interleaved "
                f"repeats, as a share of the best median of its case.", ""]
        rows = []
        for case in data["real"]:
            for budget in meta["budgets"]:
                rows.append([case["case"], f"{budget:g} s",
                             *(f"{case['picks'][f'{m}@{budget:g}']['ratio_to_best']:.2f}"
                               for m in methods)])
        out += [md_table(["pipeline", "budget", *(LABELS[m] for m in methods)], rows), ""]
        noise = common.noise_sentence(meta, data["real"])
        if noise:
            out += [noise, ""]
    out += [contribution(data), ""]
    return "\n".join(out)


def contribution(data: dict) -> str:
    """One sentence: the policy's (a) against uniform moves (b), in the simulator."""
    get = {(c["steps"], c["method"]): c for c in data["sim"]}

    def versus(a: str, b: str) -> str:
        return "; ".join(f"{s} measurements {get[(s, a)]['median']:.3f} vs "
                         f"{get[(s, b)]['median']:.3f}" for s in data["meta"]["steps"])

    text = ("What the policy adds over uniform moves, simulator medians (a) vs (b): "
            + versus("intune", "intune:uniform") + ".")
    if all((s, m) in get for s in data["meta"]["steps"] for m in TFDATA_METHODS):
        text += " On a simulated tf.data: " + versus(*TFDATA_METHODS) + "."
    return text


def plot(data: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    meta = data["meta"]
    get = {(c["steps"], c["method"]): c for c in data["sim"]}
    fig, ax = plt.subplots(figsize=(6, 4))
    for m in meta["methods"]:
        ax.plot(meta["steps"], [get[(s, m)]["median"] for s in meta["steps"]], marker="o",
                label=f"{LABELS[m]} median")
        ax.plot(meta["steps"], [get[(s, m)]["p10"] for s in meta["steps"]], marker=".",
                ls=":", color=ax.lines[-1].get_color())
    ax.set_xlabel("measurements per search")
    ax.set_ylabel("throughput / oracle (dotted: p10)")
    ax.set_title("policy ablation, simulator", fontsize=9)
    ax.legend(fontsize=7)
    common.save_plot(fig, path)


def write_outputs(data: dict, out_dir: Path, readme: Path | None) -> None:
    common.write_outputs("ablation", "Policy ablation", data, render(data), plot, out_dir, readme,
                         (START, END))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.ablation",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer pipelines, one real case")
    ap.add_argument("--no-real", action="store_true", help="the simulator only")
    ap.add_argument("--pipelines", type=int, default=None, help="sim pipelines per core count")
    ap.add_argument("--cases", default=None, help="real cases, comma-separated")
    ap.add_argument("--budgets", default=None, help="real budgets in seconds, comma-separated")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--steps", default=None, help="sim measurement budgets, comma-separated")
    ap.add_argument("--out", default=None, help="output directory (default: the mode's)")
    ap.add_argument("--no-readme", action="store_true", help="do not refresh README.md")
    args = ap.parse_args(argv)
    mode = "quick" if args.quick else "full"
    cfg = dict(MODES[mode])
    if args.pipelines is not None:
        cfg["pipelines"] = args.pipelines
    if args.cases is not None:
        cfg["cases"] = tuple(c for c in args.cases.split(",") if c)
    if args.budgets is not None:
        cfg["budgets"] = tuple(float(b) for b in args.budgets.split(","))
    if args.steps is not None:
        cfg["steps"] = tuple(int(s) for s in args.steps.split(","))
    if args.repeats is not None:
        cfg["repeats"] = args.repeats
    if args.no_real:
        cfg["cases"] = ()
    out_dir = Path(args.out) if args.out else (RESULTS / "quick" if args.quick else RESULTS)
    t0, cpu0 = time.time(), common.cpu_times()
    sim = run_sim(cfg["pipelines"], cfg["cores"], cfg["steps"], METHODS + TFDATA_METHODS)
    real = [run_real(c, cfg["budgets"], cfg["repeats"]) for c in cfg["cases"]]
    data = {"meta": {"mode": mode, "methods": list(METHODS), "pipelines": cfg["pipelines"],
                     "cores": list(cfg["cores"]), "steps": list(cfg["steps"]),
                     "budgets": list(cfg["budgets"]), "cases": list(cfg["cases"]),
                     "machine": machine(), "wall_s": None,
                     "command": "python -m benchmarks.ablation " + " ".join(
                         argv if argv is not None else sys.argv[1:])},
            "sim": sim, "real": real}
    data["meta"]["command"] = data["meta"]["command"].strip()
    data["meta"]["wall_s"] = round(time.time() - t0, 1)
    data["meta"]["steal_share"] = common.steal_share(cpu0, common.cpu_times())
    write_outputs(data, out_dir, None if args.no_readme else README)
    print(render(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
