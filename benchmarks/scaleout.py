"""Scale-out on real tf.data service workers: a sweep over K vs the agent's pick and the rules.

    python -m benchmarks.scaleout                   # 0..2 local workers of 1 core
    python -m benchmarks.scaleout --max-workers 8   # on a machine with more cores
    python -m benchmarks.scaleout --render          # re-render from scaleout.json

For each pure-TF pipeline (``intune_flow.examples.scaleout``: ``hash`` is CPU-bound,
``sleep`` latency-bound by a TF-native 20 ms delay per batch) it sweeps K = 0..N local worker
processes (dispatcher in this process, every config at AUTOTUNE, ``repeats`` interleaved
windows per K, the median kept), then runs ``tune(..., workers="local:Nx1")`` (the cluster
agent with the node agent nested; a cold cache) and the rules ``scale_until_flat`` and
``demand_match`` (through ``run_scaleout`` on the same kind of env), and measures every pick
again side by side with the sweep (interleaved): K = 0..N at AUTOTUNE and K = 0..N at the
agent's per-worker config. Cost per record is
:class:`~intune_flow.scaleout.cost.CostModel` for 1-core workers ($4/h trainer, $0.05 per
worker core-hour), in dollars per million records delivered. Writes
benchmarks/results/scaleout.{json,md,png} and the marked block in README.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from .common import RESULTS, machine, md_table, replace_block, write_json

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
START, END = "<!-- bench:scaleout:start -->", "<!-- bench:scaleout:end -->"
PIPELINES = {"hash": "intune_flow.examples.scaleout:hash_pipeline",
             "sleep": "intune_flow.examples.scaleout:sleep_pipeline"}
RULES = ("scale_until_flat", "demand_match")


def _env(pipe, pool, window_s: float):
    from intune_flow.resources import default_ram_budget, usable_cpus
    from intune_flow.scaleout.service import ServiceClusterEnv

    return ServiceClusterEnv(pipe, pool, cpu_budget=usable_cpus(), ram_budget=default_ram_budget(),
                             window_s=window_s, warmup_s=0.5)


def _windows(env, plan, repeats: int, log) -> dict:
    """``plan``: name -> (K, config); each measured ``repeats`` times, interleaved."""
    out = {name: [] for name in plan}
    for r in range(repeats):
        for name, (k, config) in plan.items():
            env.set_workers(k)
            m = env.measure(config)
            out[name].append(m.delivered if m.ok else 0.0)
            log(f"  repeat {r + 1}/{repeats} {name:<18} K={k} {m.delivered:>12,.0f} rec/s "
                f"{m.status}")
    return out


def run_pipeline(name: str, ref: str, max_workers: int, budget_s: float, repeats: int,
                 window_s: float, log=print) -> dict:
    import intune_flow
    from intune_flow.pipeline import Pipeline
    from intune_flow.scaleout import run_scaleout
    from intune_flow.scaleout.pools import LocalProcessPool

    pipe = Pipeline.load(ref)
    autotune = pipe.space.autotune()
    spec = f"local:{max_workers}x1"
    log(f"{name}: the agent (tune(workers={spec!r}, budget_s={budget_s:g}))")
    with tempfile.TemporaryDirectory(prefix="intune-scaleout-") as cache:
        t0 = time.perf_counter()
        result = intune_flow.tune(ref, workers=spec, budget_s=budget_s, cache=cache,
                                  progress=False, seed=0)
        agent_seconds = time.perf_counter() - t0
    rules = {}
    with LocalProcessPool(max_workers=max_workers, registration_timeout_s=300) as pool:
        env = _env(pipe, pool, window_s)
        for rule in RULES:
            log(f"{name}: {rule}")
            t0 = time.perf_counter()
            out = run_scaleout(env, rule, budget_s=budget_s)
            rules[rule] = {"workers": out.workers, "config": out.config,
                           "seconds": time.perf_counter() - t0}
        plan = {f"K={k}": (k, autotune) for k in range(max_workers + 1)}
        plan.update({f"K={k} agent's config": (k, result.config) for k in range(max_workers + 1)})
        plan["agent"] = (result.workers, result.config)
        plan.update({rule: (r["workers"], r["config"]) for rule, r in rules.items()})
        log(f"{name}: the sweep and the picks, side by side")
        rates = _windows(env, plan, repeats, log)
        cost = env.cost
    rows = {}
    for label, (k, config) in plan.items():
        rate = statistics.median(rates[label])
        rows[label] = {"workers": k, "config": config, "delivered": rate, "windows": rates[label],
                       "cost_per_million": cost.per_million(k, rate, env.demand)
                       if rate > 0 else None}
    sweep = [label for label in rows if label.startswith("K=")]
    best = min((label for label in sweep if rows[label]["cost_per_million"]),
               key=lambda label: rows[label]["cost_per_million"])
    return {"pipeline": ref, "max_workers": max_workers, "rows": rows,
            "best_k": rows[best]["workers"], "best_row": best,
            "agent": {"workers": result.workers, "config": result.config,
                      "source": result.source, "reason": result.reason,
                      "tuning_seconds": agent_seconds, "tuned_delivered": result.throughput,
                      "measurements": len(result.cluster_history),
                      "startups": result.worker_startups},
            "rules": rules}


def run(max_workers: int = 2, budget_s: float = 60.0, repeats: int = 3, window_s: float = 2.0,
        pipelines=None, log=print) -> dict:
    names = list(pipelines or PIPELINES)
    return {"machine": machine(), "budget_s": budget_s, "repeats": repeats, "window_s": window_s,
            "results": {n: run_pipeline(n, PIPELINES[n], max_workers, budget_s, repeats,
                                        window_s, log) for n in names}}


def render(data: dict) -> str:
    m = data["machine"]
    lines = [f"Measured by `python -m benchmarks.scaleout` on {m['usable_cpus']:g} usable cores "
             f"({m['cpu_model']}), {data['repeats']} interleaved {data['window_s']:g} s windows "
             f"per row (median; range in the JSON), local worker processes of 1 core, "
             f"budget_s={data['budget_s']:g}. Cost: $4/h trainer + $0.05/h per worker core, "
             "per million records delivered.", ""]
    for name, res in data["results"].items():
        rows = res["rows"]
        best = rows[res.get("best_row", f"K={res['best_k']}")]
        table = []
        for label, r in rows.items():
            ratio = (r["cost_per_million"] / best["cost_per_million"]
                     if r["cost_per_million"] and best["cost_per_million"] else None)
            table.append([label, r["workers"], f"{r['delivered']:,.0f}",
                          f"{r['cost_per_million']:.4f}" if r["cost_per_million"] else "-",
                          f"{ratio:.2f}" if ratio else "-"])
        a = res["agent"]
        lines += [f"**{name}** (`{res['pipeline']}`): the sweep's cheapest row is "
                  f"{res.get('best_row', res['best_k'])}; "
                  f"the agent picked K = {a['workers']} in {a['tuning_seconds']:.0f} s "
                  f"({a['measurements']} cluster windows, source {a['source']}).", "",
                  md_table(["row", "K", "records/s", "$ per M records", "vs best K"], table), ""]
    return "\n".join(lines) + "\n"


def plot(data: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = data["results"]
    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 3.6), squeeze=False)
    for ax, (name, res) in zip(axes[0], results.items()):
        ks = list(range(res["max_workers"] + 1))
        cost = [res["rows"][f"K={k}"]["cost_per_million"] or float("nan") for k in ks]
        ax.plot(ks, cost, "o-", color="gray", label="sweep (AUTOTUNE)")
        tuned = [(res["rows"].get(f"K={k} agent's config") or {}).get("cost_per_million")
                 or float("nan") for k in ks]
        ax.plot(ks, tuned, "o--", color="tab:blue", label="sweep (agent's config)")
        for label, marker in (("agent", "*"), *((r, "s") for r in RULES)):
            r = res["rows"][label]
            if r["cost_per_million"]:
                ax.plot([r["workers"]], [r["cost_per_million"]], marker, ms=11 if marker == "*"
                        else 7, label=label, alpha=0.8)
        ax.set_title(name)
        ax.set_xlabel("workers K")
        ax.set_ylabel("$ per million records")
        ax.set_xticks(ks)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(data: dict, out_dir: Path = RESULTS, readmes=(README,)) -> None:
    write_json("scaleout", data, out_dir)
    block = render(data)
    (out_dir / "scaleout.md").write_text("# Scale-out on real tf.data service workers\n\n"
                                         + block)
    plot(data, out_dir / "scaleout.png")
    for path in readmes:
        replace_block(Path(path), START, END, block)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-workers", type=int, default=2)
    ap.add_argument("--budget-s", type=float, default=60.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--window-s", type=float, default=2.0)
    ap.add_argument("--pipelines", nargs="*", choices=sorted(PIPELINES), default=None)
    ap.add_argument("--out-dir", default=None, help="default results/ (README block refreshed)")
    ap.add_argument("--render", action="store_true", help="only re-render from the JSON")
    args = ap.parse_args(argv)
    out_dir = Path(args.out_dir) if args.out_dir else RESULTS
    readmes = (README,) if args.out_dir is None else ()
    if args.render:
        write_outputs(json.loads((out_dir / "scaleout.json").read_text()), out_dir, readmes)
        return 0
    data = run(args.max_workers, args.budget_s, args.repeats, args.window_s, args.pipelines)
    write_outputs(data, out_dir, readmes)
    print(render(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
