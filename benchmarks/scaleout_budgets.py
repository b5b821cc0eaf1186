"""Scale-out at short budgets: ``tune(workers=...)`` vs ``tune()`` on the trainer, side by side.

    python -m benchmarks.scaleout_budgets                          # B = 10..60 s, 2 runs each
    python -m benchmarks.scaleout_budgets --budgets 20 --runs 1    # a quick look
    python -m benchmarks.scaleout_budgets --render                 # re-render from the JSON

A scale-out run spends part of its budget starting workers, so at short budgets the question
is what is left for the trainer's own search. For each budget B this runs ``--runs`` cold
tunes (a fresh cache each) of ``tune(ref, workers="local:Nx1", budget_s=B)`` and of
``tune(ref, budget_s=B)``, records each one's wall time against B, then measures every
returned (K, config) and all-AUTOTUNE at K = 0 side by side on one pool (``--repeats``
interleaved windows, grouped by K within a repeat so that workers start once per K and
repeat). Writes benchmarks/results/scaleout_budgets.{json,md,png} and the marked block in
docs/scaleout.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from . import common
from .common import RESULTS, machine, md_table, save_plot
from .scaleout import PIPELINES, _env

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "scaleout.md"
START, END = "<!-- bench:scaleout_budgets:start -->", "<!-- bench:scaleout_budgets:end -->"
METHODS = {"scale-out": "tune(workers=...)", "single-node": "tune()"}
STAGES = {"tune the trainer": "T", "start the first worker": "S", "tune the worker": "W",
          "refine the trainer": "R", "restart the pick's workers": "P"}
"""Short names of the stages in the table; a cluster agent's move reads "+K"."""


def _stages(t: dict) -> str:
    names = [STAGES.get(s, "+" + s.split()[1] if s.startswith("start ") else s)
             for s in t.get("stages", [])]
    return " ".join(names) or "-"


def _tune(ref: str, method: str, budget_s: float, spec: str, seed: int) -> dict:
    import intune_flow

    workers = spec if method == "scale-out" else None
    with tempfile.TemporaryDirectory(prefix="intune-so-budget-") as cache:
        t0 = time.perf_counter()
        result = intune_flow.tune(ref, workers=workers, budget_s=budget_s, cache=cache,
                                  progress=False, seed=seed)
        wall = time.perf_counter() - t0
    return {"workers": result.workers, "config": dict(result.config), "source": result.source,
            "reason": result.reason, "tuning_seconds": round(result.tuning_seconds, 2),
            "wall_seconds": round(wall, 2), "startups": len(result.worker_startups or []),
            "stages": [s["stage"] for s in result.scaleout_stages if s["ran"]]}


def run_pipeline(name: str, budgets, runs: int, max_workers: int, repeats: int,
                 window_s: float, log=print) -> dict:
    from intune_flow.agent.walk import config_key
    from intune_flow.pipeline import Pipeline
    from intune_flow.scaleout.pools import LocalProcessPool

    ref = PIPELINES[name]
    spec = f"local:{max_workers}x1"
    tunes = []
    for budget in budgets:
        for seed in range(runs):
            for method in METHODS:
                log(f"{name}: B={budget:g} run {seed + 1}/{runs} {METHODS[method]}")
                t = _tune(ref, method, budget, spec, seed)
                tunes.append({"method": method, "budget_s": budget, "seed": seed, **t})
                log(f"  -> K={t['workers']} {t['config']} in {t['wall_seconds']:.1f} s "
                    f"({t['source']})")
    pipe = Pipeline.load(ref)
    picks = {("autotune", 0, config_key(pipe.space.autotune())): (0, pipe.space.autotune())}
    for t in tunes:
        picks.setdefault(("pick", t["workers"], config_key(t["config"])),
                         (t["workers"], t["config"]))
    labels = {key: ("K=0 AUTOTUNE" if key[0] == "autotune" else f"p{i}")
              for i, key in enumerate(picks)}
    order = sorted(picks, key=lambda key: picks[key][0])  # one start-up per K and repeat
    windows = {labels[key]: [] for key in picks}
    with LocalProcessPool(max_workers=max_workers, registration_timeout_s=300) as pool:
        env = _env(pipe, pool, window_s)
        for r in range(repeats):
            for key in order:
                k, config = picks[key]
                env.set_workers(k)
                m = env.measure(config)
                windows[labels[key]].append(m.delivered if m.ok else 0.0)
                log(f"  repeat {r + 1}/{repeats} {labels[key]:<13} K={k} "
                    f"{m.delivered:>12,.0f} rec/s {m.status}")
    medians = {label: statistics.median(w) for label, w in windows.items()}
    auto = medians["K=0 AUTOTUNE"] or 1.0
    for t in tunes:
        label = labels[("pick", t["workers"], config_key(t["config"]))]
        t.update(label=label, delivered=medians[label], vs_autotune=round(medians[label] / auto, 2))
    return {"pipeline": ref, "pool": spec, "budgets": list(budgets), "runs": runs,
            "tunes": tunes, "windows": windows, "autotune": auto,
            "configs": {labels[key]: {"workers": k, "config": c}
                        for key, (k, c) in picks.items()}}


def run(budgets, runs: int = 2, max_workers: int = 2, repeats: int = 3, window_s: float = 2.0,
        pipelines=("sleep",), log=print) -> dict:
    return {"machine": machine(), "repeats": repeats, "window_s": window_s, "command": None,
            "results": {n: run_pipeline(n, budgets, runs, max_workers, repeats, window_s, log)
                        for n in pipelines}}


def render(data: dict) -> str:
    m = data["machine"]
    lines = [f"Measured on {m['usable_cpus']:g} usable cores ({m['cpu_model']}), {m['date']}, "
             f"with `{data['command']}`: cold tunes (a fresh cache each), then every returned "
             f"(K, config) and all-AUTOTUNE at K = 0 measured side by side, "
             f"{data['repeats']} interleaved {data['window_s']:g} s windows each (median). "
             "Stages that ran: T the trainer's search, S the first worker's start, W its "
             "search, +n a cluster move starting n workers, R the trainer refined, P the "
             "pick's workers started again (scale-out runs only).", ""]
    for name, res in data["results"].items():
        rows = []
        for budget in res["budgets"]:
            for method in METHODS:
                ts = [t for t in res["tunes"] if t["budget_s"] == budget and t["method"] == method]
                rows.append([f"{budget:g} s", METHODS[method],
                             ", ".join(f"{t['wall_seconds']:.0f}" for t in ts),
                             "; ".join(_stages(t) for t in ts) if method == "scale-out"
                             else "-",
                             ", ".join(str(t["workers"]) for t in ts),
                             ", ".join(f"{t['delivered']:,.0f}" for t in ts),
                             ", ".join(f"{t['vs_autotune']:.1f}x" for t in ts)])
        lines += [f"**{name}** (`{res['pipeline']}`, pool `{res['pool']}`; all-AUTOTUNE at K = 0: "
                  f"{res['autotune']:,.0f} records/s):", "",
                  md_table(["B", "method", "wall s (per run)", "stages", "K", "records/s",
                            "x AUTOTUNE"], rows), ""]
    return "\n".join(lines) + "\n"


def plot(data: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = data["results"]
    fig, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 3.6), squeeze=False)
    for ax, (name, res) in zip(axes[0], results.items()):
        for i, (method, marker) in enumerate(zip(METHODS, "o^")):
            ts = [t for t in res["tunes"] if t["method"] == method]
            ax.plot([t["budget_s"] * (1 + 0.03 * (2 * i - 1)) for t in ts],
                    [t["vs_autotune"] for t in ts], marker, label=METHODS[method], alpha=0.8)
        ax.axhline(1.0, color="grey", ls=":", label="all-AUTOTUNE, K = 0")
        ax.set_xscale("log")
        ax.set_xticks(res["budgets"], [f"{b:g}" for b in res["budgets"]])
        ax.set_title(name)
        ax.set_xlabel("budget_s")
        ax.set_ylabel("returned config, x all-AUTOTUNE")
        ax.legend(fontsize=7)
    save_plot(fig, path)


def write_outputs(data: dict, out_dir: Path = RESULTS, doc: Path | None = DOC) -> None:
    """scaleout_budgets.{json,md,png} in ``out_dir``; with ``doc``, its marked block."""
    common.write_outputs("scaleout_budgets", "Scale-out at short budgets", data, render(data),
                         plot, out_dir, doc, (START, END))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.scaleout_budgets",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--budgets", default="10,15,20,30,60",
                    help="budget_s values, comma-separated")
    ap.add_argument("--runs", type=int, default=2, help="cold tunes per method and budget")
    ap.add_argument("--max-workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--window-s", type=float, default=2.0)
    ap.add_argument("--pipelines", default="sleep", help=f"comma-separated: {sorted(PIPELINES)}")
    ap.add_argument("--out-dir", default=None,
                    help="default benchmarks/results/ (and the block in docs/scaleout.md)")
    ap.add_argument("--render", action="store_true", help="only re-render from the JSON")
    args = ap.parse_args(argv)
    out_dir = Path(args.out_dir) if args.out_dir else RESULTS
    doc = DOC if args.out_dir is None else None
    if args.render:
        write_outputs(json.loads((out_dir / "scaleout_budgets.json").read_text()), out_dir, doc)
        return 0
    try:
        budgets = [float(b) for b in args.budgets.split(",") if b.strip()]
    except ValueError:
        ap.error(f"--budgets takes seconds separated by commas, e.g. 15,20; got {args.budgets!r}")
    names = [n.strip() for n in args.pipelines.split(",") if n.strip()]
    unknown = sorted(set(names) - set(PIPELINES))
    if unknown:
        ap.error(f"unknown pipeline(s) {unknown}; choose from {sorted(PIPELINES)}")
    if not budgets or min(budgets) <= 0 or args.runs < 1 or args.repeats < 1:
        ap.error("budgets must be positive; --runs and --repeats at least 1")
    data = run(budgets, args.runs, args.max_workers, args.repeats, args.window_s, names)
    data["command"] = " ".join(["python -m benchmarks.scaleout_budgets",
                                *(argv if argv is not None else sys.argv[1:])])
    write_outputs(data, out_dir, doc)
    print(render(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
