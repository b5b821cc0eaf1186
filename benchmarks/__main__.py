"""``python -m benchmarks [--quick | --full] [--only real,nightly,training,sim]``.

Writes raw results as JSON under benchmarks/results/, then Markdown tables and PNG plots
(benchmarks/report.py), and refreshes the README's performance block from the JSON.
``--only ablation`` and ``--only generality`` run the policy ablation
(:mod:`benchmarks.ablation`) and the generality suite (:mod:`benchmarks.generality`) in the
same mode; they are not part of the default run (each takes 10-15 minutes quick).
"""

from __future__ import annotations

import argparse
import sys
import time

from .common import RESULTS, machine, write_json

MODES = {
    # pipelines, per-method search budget, interleaved repeats, probe window, long-search budget
    "quick": {"cases": ["cpu", "latency", "memory"], "budget_s": 25.0, "repeats": 3,
              "window_s": 1.5, "long_budget_s": 0.0, "nightly_budget_s": 10.0,
              "train_steps": 60, "train_repeats": 2},
    "full": {"cases": ["cpu", "latency", "memory", "torch"], "budget_s": 60.0, "repeats": 5,
             "window_s": 3.0, "long_budget_s": 180.0, "nightly_budget_s": 30.0,
             "train_steps": 200, "train_repeats": 3},
}
PARTS = ("real", "nightly", "training", "sim")
EXTRA = ("ablation", "generality")
"""Parts run only when named in ``--only`` (each is its own module with its own outputs)."""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_const", dest="mode", const="quick",
                      help="a few minutes (default)")
    mode.add_argument("--full", action="store_const", dest="mode", const="full",
                      help="the thorough run (~an hour on 2 cores)")
    parser.add_argument("--only", default=",".join(PARTS),
                        help=f"comma-separated parts to run, of {','.join(PARTS + EXTRA)}")
    parser.add_argument("--cases", default=None, help="real-pipeline cases (default: the mode's)")
    parser.add_argument("--label", default=None,
                        help="suffix for result files (e.g. a machine name: real-h200.json)")
    parser.add_argument("--repeats", type=int, default=None,
                        help="interleaved repeats per config (default: the mode's)")
    parser.add_argument("--no-readme", action="store_true", help="do not refresh README.md")
    args = parser.parse_args(argv)
    cfg = dict(MODES[args.mode or "quick"])
    if args.repeats is not None:
        if args.repeats < 1:
            parser.error("--repeats must be at least 1")
        cfg["repeats"] = args.repeats
    parts = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = sorted(set(parts) - set(PARTS) - set(EXTRA))
    if unknown:
        parser.error(f"unknown part(s) {unknown}; choose from {list(PARTS + EXTRA)}")
    suffix = f"-{args.label}" if args.label else ""
    meta = {"mode": args.mode or "quick", "machine": machine(), "settings": cfg,
            "command": "python -m benchmarks " + " ".join(argv if argv is not None else sys.argv[1:])}
    t0 = time.perf_counter()

    real = None
    if "real" in parts:
        from .real_pipelines import CASES, run_case
        names = args.cases.split(",") if args.cases else cfg["cases"]
        real = {**meta, "cases": [run_case(CASES[n], budget_s=cfg["budget_s"], repeats=cfg["repeats"],
                                           window_s=cfg["window_s"],
                                           long_budget_s=cfg["long_budget_s"]) for n in names]}
        write_json(f"real{suffix}", real)
    if "nightly" in parts:
        from .nightly import run as run_nightly
        print("[nightly] 8 nights: night 4 on half the cores, night 6 with a changed schema")
        write_json(f"nightly{suffix}", {**meta, **run_nightly(budget_s=cfg["nightly_budget_s"],
                                                              window_s=cfg["window_s"])})
    if "training" in parts:
        import json
        from .training import run as run_training
        real = real or json.loads((RESULTS / f"real{suffix}.json").read_text())
        picks = {c["case"]: {"ref": c["ref"], "kwargs": c["kwargs"],
                             "autotune": c["methods"]["autotune"]["config"],
                             "intune": c["methods"]["intune_cold"]["config"]}
                 for c in real["cases"] if "autotune" in c["methods"] and c["case"] != "memory"}
        write_json(f"training{suffix}", {**meta, "cases": run_training(
            picks, steps=cfg["train_steps"], repeats=cfg["train_repeats"])})
    if "sim" in parts:
        from . import sim_bench
        sim_bench.main(["--quick"] if (args.mode or "quick") == "quick" else [])
    for extra in EXTRA:
        if extra in parts:
            import importlib
            importlib.import_module(f".{extra}", __package__).main(
                (["--quick"] if (args.mode or "quick") == "quick" else [])
                + (["--no-readme"] if args.no_readme else []))
    if not set(parts) & set(PARTS):
        return 0
    from . import report
    report.write_all(suffix=suffix, update_readme=not args.no_readme and not suffix)
    print(f"benchmarks done in {time.perf_counter() - t0:.0f} s; results in {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
