"""Generality suite: ``tune()`` on pipelines it has never seen, against the best config known.

    python -m benchmarks.generality           # full: 5 repeats, a 120 s hill-climb per pipeline
    python -m benchmarks.generality --quick   # 3 repeats, grid only; into results/quick/
    python -m benchmarks.generality --cases two_maps,dataloader --budgets 20
    python -m benchmarks.generality --cases interleave --budgets 20 --cpu-load 0.25
    python -m benchmarks.generality --cases mixed_sources \
        --compare '{"pool3": {"threadpool": 3}, "pool8": {"threadpool": 8}}'

The pipelines (:mod:`benchmarks.generality_pipelines`) are written as a user would from the
README; their data is generated into a temp dir that is removed at the end. For each one:
``tune(factory, budget_s=20)`` and ``budget_s=60`` (cold, a fresh cache each), default
AUTOTUNE (torch: parallelism = cores, buffers = 2), and the best config known: a grid that
scales every stage together, measured once per config, and in the full mode a hill-climb
from its best. Then the tuned configs, AUTOTUNE and the grid's best (and the hill-climb's)
are measured side by side, interleaved, ``repeats`` times; "best known" is the highest
median among them. Targets (reported, not asserted): at 60 s >= 0.95 of the best known and
>= 0.97 x AUTOTUNE; at 20 s >= 0.90 of the best known.

Writes benchmarks/results/generality.{json,md,png} and refreshes the README's table.
``--compare`` measures only the named configs (knobs left out at the factory's defaults) side
by side, interleaved, on each case, and writes generality_compare.{json,md}: the figures a
change to the tuner starts from. ``--cpu-load SHARE`` runs each ``tune()`` while other
processes keep that share of the CPU busy (:mod:`benchmarks.cpu_load`: a shared machine, made
repeatable); the grid, the long search and the side-by-side measurement run without it.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

from . import common
from .common import RESULTS, interleaved, machine, md_table, summary
from .cpu_load import cpu_load as load_cpu

README = Path(__file__).resolve().parent.parent / "README.md"
START, END = "<!-- generality:start -->", "<!-- generality:end -->"
MODES = {
    "quick": {"budgets": (20.0, 60.0), "repeats": 3, "window_s": 1.0, "long_budget_s": 0.0},
    "full": {"budgets": (20.0, 60.0), "repeats": 5, "window_s": 2.0, "long_budget_s": 120.0},
}
TARGETS = {60.0: 0.95, 20.0: 0.90}
VS_AUTOTUNE = 0.97
GRID = (1, 2, 4, 8, 16, 32, 64)


def grid(space) -> list[dict]:
    """Every parallelism and thread knob at the same value (snapped to its grid), buffers at
    8 (within their bounds): the configs a user would try by hand, one per order of size."""
    from intune_flow.knobs import THREAD_KINDS

    def snap(k, want):
        return min(k.grid(), key=lambda g: abs(g - want))

    out = []
    for p in GRID:
        cfg = {k.name: snap(k, p) if k.kind in THREAD_KINDS else snap(k, max(k.default, 8))
               for k in space}
        if cfg not in out:
            out.append(cfg)
    return out


def case_ram_budget(case, pipeline) -> int | None:
    """The case's RAM budget in bytes (None: it states no headroom). One budget for the
    whole case, fixed before its measurements: the process grows as the case goes on, and a
    budget taken later would be looser for what runs later. It starts from the RSS after
    one short run of the smallest config and with the search's policy loaded (torch: ~280
    MiB), so the framework's runtime and torch are in it whether or not a case ran before
    this one (taken earlier, ``--cases memory`` alone got a budget its first probe passed)."""
    from intune_flow.real_env import PipelineEnv
    from intune_flow.resources import current_rss
    from intune_flow.search.intune import load_policy

    if not case.ram_headroom_mib:
        return None
    load_policy()
    PipelineEnv(pipeline, window_s=0.5, warmup_s=0.2).measure(pipeline.space.ones())
    return current_rss() + case.ram_headroom_mib * 2**20


def run_case(case, kwargs: dict, *, budgets, repeats: int, window_s: float,
             long_budget_s: float, seed: int = 0, cpu_load: float = 0.0, log=print) -> dict:
    from intune_flow import tune
    from intune_flow.pipeline import Pipeline
    from intune_flow.real_env import PipelineEnv
    from intune_flow.resources import usable_cpus
    from intune_flow.search import run_search

    pipeline = Pipeline.load(case.factory, **kwargs)
    space = pipeline.space
    budget_ram = case_ram_budget(case, pipeline)

    def ram():
        return budget_ram

    log(f"[generality] {case.name}: {case.kind}  knobs={list(space.names)}")
    picks = {"autotune": {"config": space.autotune()}}
    for budget in budgets:
        cache = tempfile.mkdtemp(prefix="intune-gen-cache-")
        try:
            t0 = time.perf_counter()
            done = {}     # the search's "done" event: which end-of-search rule chose

            def on_event(ev):
                if ev["event"] == "done":
                    done.update(ev)

            with load_cpu(cpu_load, usable_cpus()):
                res = tune(case.factory, budget_s=budget, cache=cache, pipeline_kwargs=kwargs,
                           ram_budget=ram(), seed=seed, progress=on_event)
            picks[f"tune{budget:g}"] = {"config": dict(res.config), "source": res.source,
                                        "tuning_seconds": round(res.tuning_seconds, 1),
                                        "wall_seconds": round(time.perf_counter() - t0, 1),
                                        "measurements": len(res.history),
                                        "warnings": list(res.warnings),
                                        "chosen_by": done.get("chosen_by"),
                                        "trace": _trace(res.history)}
            log(f"  tune {budget:g}s -> {res.config} ({res.tuning_seconds:.0f} s)")
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    env = PipelineEnv(pipeline, ram_budget=ram(), window_s=window_s, warmup_s=0.3)
    seen = [(env.measure(cfg), cfg) for cfg in grid(space)]
    ok = [(m.throughput, cfg) for m, cfg in seen if m.ok]
    if ok:
        best = max(ok, key=lambda t: t[0])[1]
        picks["grid"] = {"config": best, "grid_size": len(seen)}
        log(f"  grid ({len(seen)} configs) -> {best}")
        if long_budget_s > 0:
            out = run_search(PipelineEnv(pipeline, ram_budget=ram(), window_s=window_s,
                                         warmup_s=0.3), "hillclimb", start=best,
                             budget_s=long_budget_s, seed=seed + 1, progress=False)
            picks["long_search"] = {"config": dict(out.best.config)}
            log(f"  hill-climb {long_budget_s:g}s -> {out.best.config}")
    final = PipelineEnv(pipeline, ram_budget=ram(), window_s=window_s, warmup_s=0.3)
    runs = interleaved(final.measure, {n: p["config"] for n, p in picks.items()}, repeats,
                       log=log)
    for name, p in picks.items():
        p["throughput"] = _throughput(runs[name])
        p["statuses"] = [m["status"] for m in runs[name]]
    top_name = max(picks, key=lambda n: picks[n]["throughput"]["median"])
    top = picks[top_name]["throughput"]["median"] or 1.0
    auto = picks["autotune"]["throughput"]["median"]
    for p in picks.values():
        p["ratio_to_best"] = p["throughput"]["median"] / top
        p["vs_autotune"] = p["throughput"]["median"] / auto if auto else None
    return {"case": case.name, "kind": case.kind, "framework": pipeline.framework,
            "knobs": list(space.names), "best_known": top_name, "picks": picks,
            "targets": targets(picks, budgets), "repeats": repeats, "window_s": window_s}


def _throughput(measurements: list[dict]) -> dict:
    """Median, min and max throughput of one config's repeats, a failed one counting 0."""
    return summary([m["throughput"] if m["status"] == "ok" else 0.0 for m in measurements])


def compare_case(case, pipeline, configs: dict, *, repeats: int, window_s: float,
                 log=print) -> dict:
    """Complete ``configs`` (name -> config) of ``pipeline`` measured side by side,
    interleaved, ``repeats`` times, under the case's RAM budget as in the suite
    (:func:`case_ram_budget`); each median as a share of the highest, with the median
    busy share of each stage the probe has a signal for (what the search reads)."""
    import statistics

    from intune_flow.real_env import PipelineEnv

    log(f"[generality] {case.name}: {case.kind}  comparing {list(configs)}")
    ram = case_ram_budget(case, pipeline)
    env = PipelineEnv(pipeline, ram_budget=ram, window_s=window_s, warmup_s=0.3)
    runs = interleaved(env.measure, configs, repeats, log=log)
    rows = {name: {"config": configs[name],
                   "throughput": _throughput(runs[name]),
                   "cpu_util": summary([m["cpu_util"] for m in runs[name]]),
                   "statuses": [m["status"] for m in runs[name]]} for name in configs}
    for name, r in rows.items():
        looks = [m["stage_signals"] for m in runs[name] if m["status"] == "ok"]
        knobs = sorted({k for sig in looks for k in sig})
        r["signals"] = {k: round(statistics.median(sig[k] for sig in looks if k in sig), 3)
                        for k in knobs}
    top = max(r["throughput"]["median"] for r in rows.values()) or 1.0
    for r in rows.values():
        r["ratio_to_best"] = r["throughput"]["median"] / top
    return {"case": case.name, "kind": case.kind, "repeats": repeats, "window_s": window_s,
            "ram_budget": ram, "configs": rows}


def render_compare(data: dict) -> str:
    m = data["meta"]
    head = (f"Measured on {m['machine']['usable_cpus']} usable cores, {m['machine']['date']}, "
            f"with `{m['command']}`: each config's median of {m['repeats']} interleaved "
            f"repeats ({m['window_s']:g} s windows), min and max, the median as a share "
            "of the highest in its case, and each stage's median busy share where the probe "
            "has one.\n\n")
    rows = []
    for c in data["cases"]:
        for name, r in c["configs"].items():
            t = r["throughput"]
            rows.append([c["case"], name, ", ".join(f"{k}={v}" for k, v in r["config"].items()),
                         f"{t['median']:,.0f}", f"{t['min']:,.0f}-{t['max']:,.0f}",
                         f"{r['cpu_util']['median']:.2f}", f"{r['ratio_to_best']:.2f}",
                         ", ".join(f"{k} {v:.2f}" for k, v in r.get("signals", {}).items())])
    return head + md_table(["pipeline", "name", "config", "median", "min-max", "cpu",
                            "/ best", "busy shares"], rows) + "\n"


def parse_compare(text: str) -> dict:
    """``--compare``'s JSON: {name: {knob: int}}; a clear error for anything else."""
    import json
    try:
        configs = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"--compare is not JSON ({e}); give "
                         '\'{"name": {"knob": 4}, "other": {"knob": 8}}\'') from None
    if not isinstance(configs, dict) or not configs or \
            not all(isinstance(c, dict) for c in configs.values()):
        raise ValueError("--compare takes a JSON object of named configs, each an object of "
                         'knob to integer: \'{"name": {"knob": 4}, "other": {"knob": 8}}\'')
    return configs


def targets(picks: dict, budgets) -> dict:
    """Each budget's target met or not, and why not (the spread of repeats or the configs)."""
    out = {}
    best = max(picks.values(), key=lambda p: p["throughput"]["median"])
    for budget in budgets:
        p = picks.get(f"tune{budget:g}")
        if p is None:
            continue
        need = TARGETS.get(budget, 0.90)
        misses = []
        if p["ratio_to_best"] < need:
            misses.append(f"{p['ratio_to_best']:.3f} of the best known (< {need:.2f})")
        if budget >= 60 and p["vs_autotune"] is not None and p["vs_autotune"] < VS_AUTOTUNE:
            misses.append(f"{p['vs_autotune']:.3f} x AUTOTUNE (< {VS_AUTOTUNE:.2f})")
        reason = ""
        if misses:
            overlap = p["throughput"]["max"] >= best["throughput"]["min"]
            reason = ("; ".join(misses) + (
                ": within the spread of the repeats (its max reaches the best's min)"
                if overlap else f": tuned {p['config']} vs best {best['config']}"))
        out[f"{budget:g}"] = {"met": not misses, "reason": reason}
    return out


def render(data: dict) -> str:
    meta = data["meta"]
    budgets = meta["budgets"]
    rows = []
    for c in data["cases"]:
        p = c["picks"]
        row = [c["case"], c["kind"], f"{p['autotune']['ratio_to_best']:.2f}"]
        row += [f"{p[f'tune{b:g}']['ratio_to_best']:.2f}" for b in budgets]
        last = p[f"tune{budgets[-1]:g}"]
        row.append(f"{last['vs_autotune']:.2f}" if last["vs_autotune"] else "-")
        row.append(c["best_known"])
        notes = [f"{b} s: {t['reason']}" for b, t in c["targets"].items() if not t["met"]]
        row.append("met" if not notes else "missed at " + " / ".join(notes))
        rows.append(row)
    met = sum(all(t["met"] for t in c["targets"].values()) for c in data["cases"])
    head = [f"Measured on {meta['machine']['usable_cpus']} usable cores, "
            f"{meta['machine']['date']}, with `{meta['command']}`: each config's median of "
            f"{meta['repeats']} interleaved repeats ({meta['window_s']:g} s windows) as a share "
            f"of the best config known (the highest median among the grid's best"
            f"{', the long search' if meta['long_budget_s'] else ''}, AUTOTUNE and the tuned "
            f"configs). Targets: >= {TARGETS[60.0]:.2f} of the best and >= {VS_AUTOTUNE:.2f} x "
            f"AUTOTUNE at 60 s, >= {TARGETS[20.0]:.2f} at 20 s; met on {met} of "
            f"{len(data['cases'])} pipelines.", ""]
    noise = common.noise_sentence(meta, data["cases"])
    if noise:
        head += [noise, ""]
    if meta.get("cpu_load"):
        head += [f"Each tune() ran while other processes kept {meta['cpu_load']:.0%} of the CPU "
                 "busy (`--cpu-load`); the configs were measured side by side without them.",
                 ""]
    table = md_table(["pipeline", "shape", "AUTOTUNE", *(f"tune {b:g} s" for b in budgets),
                      f"tune {budgets[-1]:g} s / AUTOTUNE", "best known", "targets"], rows)
    return "\n".join(head) + "\n" + table + "\n\n" + hybrids(data)


def hybrids(data: dict) -> str:
    """A line naming the measured configs that mix AUTOTUNE with set knobs (tf.data), with
    their share of the best known: where a hybrid wins, and where it does not."""
    from intune_flow.knobs import AUTOTUNE
    found = []
    for c in data["cases"]:
        for name, p in c["picks"].items():
            values = set(p["config"].values())
            # the AUTOTUNE baseline keeps a knob that rejects AUTOTUNE (a shuffle buffer) set
            if name != "autotune" and AUTOTUNE in values and values != {AUTOTUNE}:
                auto = sorted(k for k, v in p["config"].items() if v == AUTOTUNE)
                found.append(f"{c['case']} {name} {p['ratio_to_best']:.2f} "
                             f"({', '.join(auto)} at AUTOTUNE)")
    if not found:
        return ""
    return ("Configs that mix AUTOTUNE with set knobs, as a share of the best known: "
            + "; ".join(found) + ".\n\n")


def plot(data: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    names = [c["case"] for c in data["cases"]]
    series = ["autotune", *(f"tune{b:g}" for b in data["meta"]["budgets"])]
    fig, ax = plt.subplots(figsize=(max(6, len(names) * 0.9), 4))
    w = 0.8 / len(series)
    for j, s in enumerate(series):
        ax.bar(np.arange(len(names)) + j * w,
               [c["picks"][s]["ratio_to_best"] for c in data["cases"]], w, label=s)
    ax.set_xticks(np.arange(len(names)) + 0.4 - w / 2, names, rotation=30, ha="right",
                  fontsize=8)
    ax.axhline(TARGETS[60.0], color="k", lw=0.8, ls="--")
    ax.axhline(TARGETS[20.0], color="k", lw=0.6, ls=":")
    ax.set_ylabel("median throughput / best known")
    ax.set_ylim(0, 1.1)
    ax.legend(fontsize=8)
    common.save_plot(fig, path)


def write_outputs(data: dict, out_dir: Path, readme: Path | None) -> None:
    common.write_outputs("generality", "Generality suite", data, render(data), plot, out_dir, readme,
                         (START, END), image="generality")


def _trace(history) -> list[dict]:
    """The search's measurements, in order, kept so a miss can be read afterwards: which
    configs it tried, what each window read and how busy the CPU was (by this process, and
    by anyone: ``cpu_busy``)."""
    return [{"config": dict(m.config), "throughput": round(m.throughput, 1),
             "cpu_util": round(m.cpu_util, 2), "cpu_busy": round(m.cpu_busy, 2),
             "status": m.status} for m in history]


def main(argv=None) -> int:
    from intune_flow.errors import KnobError
    from intune_flow.pipeline import Pipeline

    from .generality_pipelines import CASES, prepare
    ap = argparse.ArgumentParser(prog="python -m benchmarks.generality",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats, shorter windows")
    ap.add_argument("--cases", default=None, help=f"comma-separated, of {','.join(CASES)}")
    ap.add_argument("--budgets", default=None, help="tune() budgets in seconds (default 20,60)")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--window-s", type=float, default=None)
    ap.add_argument("--long-budget-s", type=float, default=None)
    ap.add_argument("--out", default=None, help="output directory (default: the mode's)")
    ap.add_argument("--no-readme", action="store_true", help="do not refresh README.md")
    ap.add_argument("--cpu-load", type=float, default=0.0, metavar="SHARE",
                    help="run each tune() while other processes keep this share (0..1) of the "
                         "CPU busy; the side-by-side measurement runs without it")
    ap.add_argument("--compare", default=None, metavar="JSON",
                    help='only measure these configs side by side: {"name": {"knob": 4}, ...}, '
                         "knobs left out at the factory's defaults (AUTOTUNE: -1)")
    args = ap.parse_args(argv)
    if not 0 <= args.cpu_load < 1:
        ap.error(f"--cpu-load must be a share of the CPU in [0, 1), got {args.cpu_load:g}; "
                 "e.g. --cpu-load 0.25")
    if args.cpu_load and args.compare is not None:
        ap.error("--cpu-load loads the CPU while tune() runs; --compare runs no tune()")
    # DataLoader warns at every build with more workers than cores: what the knob explores.
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    mode = "quick" if args.quick else "full"
    cfg = dict(MODES[mode])
    for key in ("repeats", "window_s", "long_budget_s"):
        if getattr(args, key) is not None:
            cfg[key] = getattr(args, key)
    if args.budgets:
        cfg["budgets"] = tuple(float(b) for b in args.budgets.split(","))
    names = args.cases.split(",") if args.cases else list(CASES)
    unknown = sorted(set(names) - set(CASES))
    if unknown:
        ap.error(f"unknown case(s) {unknown}; choose from {list(CASES)}")
    compare = None
    if args.compare is not None:
        try:
            compare = parse_compare(args.compare)
        except ValueError as e:
            ap.error(str(e))
    out_dir = Path(args.out) if args.out else (RESULTS / "quick" if args.quick else RESULTS)
    t0, cpu0 = time.time(), common.cpu_times()
    root = Path(tempfile.mkdtemp(prefix="intune-generality-"))
    try:
        kwargs = prepare(root, names)
        if compare is None:
            cases = [run_case(CASES[n], kwargs[n], cpu_load=args.cpu_load, **cfg)
                     for n in names]
        else:
            pipelines, full = {}, {}
            for n in names:     # every config checked before anything is measured
                pipelines[n] = Pipeline.load(CASES[n].factory, **kwargs[n])
                try:
                    full[n] = {name: pipelines[n].space.validate(c) for name, c in compare.items()}
                except KnobError as e:
                    ap.error(f"--compare on {n}: {e}")
            cases = [compare_case(CASES[n], pipelines[n], full[n], repeats=cfg["repeats"],
                                  window_s=cfg["window_s"]) for n in names]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    command = "python -m benchmarks.generality " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    data = {"meta": {"mode": mode, **cfg, "budgets": list(cfg["budgets"]),
                     "machine": machine(), "command": command.strip(),
                     "wall_s": round(time.time() - t0, 1),
                     "steal_share": common.steal_share(cpu0, common.cpu_times()),
                     "cpu_load": args.cpu_load},
            "cases": cases}
    if compare is not None:
        table = render_compare(data)
        common.write_json("generality_compare", data, out_dir)
        (out_dir / "generality_compare.md").write_text(
            "# Generality suite: configs side by side\n\n" + table)
        print(table)
        return 0
    write_outputs(data, out_dir, None if args.no_readme else README)
    print(render(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
