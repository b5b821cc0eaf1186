"""Markdown tables and PNG plots from the benchmark JSON; refreshes the README's performance block.

Every number shown comes from benchmarks/results/*.json, written by ``python -m benchmarks``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from .common import RESULTS, md_table

README = Path(__file__).resolve().parent.parent / "README.md"
START, END = "<!-- bench:start -->", "<!-- bench:end -->"
ORDER = ("ones", "autotune", "heuristic", "hillclimb", "random", "optuna", "intune_cold",
         "intune_warm", "best_found")


def _load(name: str):
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _fmt_range(s: dict, scale: float = 1.0, digits: int = 0) -> str:
    f = f"{{:,.{digits}f}}"
    return f"{f.format(s['median'] / scale)} ({f.format(s['min'] / scale)}-{f.format(s['max'] / scale)})"


def real_table(real: dict) -> str:
    out = []
    for case in real["cases"]:
        rows = []
        for name in ORDER:
            r = case["methods"].get(name)
            if r is None:
                continue
            rows.append([name, _fmt_range(r["throughput"]), f"{r['ratio_to_best']:.2f}",
                         "-" if r["ratio_to_autotune"] is None else f"{r['ratio_to_autotune']:.2f}",
                         "-" if r.get("tuning_seconds") is None else f"{r['tuning_seconds']:.1f}",
                         f"{r['peak_rss_mib']['median']:,.0f}",
                         r["ram_violations"] + r.get("search_violations", 0), r["crashes"]])
        out.append(f"**{case['case']}** - {case['kind']} (`{case['ref']}`, RAM budget "
                   f"{case['ram_budget_bytes'] / 2**30:.2f} GiB, search budget {case['budget_s']:g} s, "
                   f"{case['repeats']} interleaved repeats of {case['window_s']:g} s)\n")
        out.append(md_table(["method", "records/s median (min-max)", "vs best", "vs AUTOTUNE",
                             "tuning s", "peak RSS MiB", "RAM violations", "crashes"], rows))
        out.append("")
    return "\n".join(out)


def nightly_table(nightly: dict) -> str:
    rows = []
    for night in nightly["nights"]:
        cells = [night["night"], ("half cores" if night["small_machine"] else "") +
                 ("changed schema" if night["ref"].endswith("memory_pipeline") else "")]
        for p in ("intune_cached", "intune_cold", "autotune"):
            r = night.get(p)
            cells.append("-" if r is None else
                         f"{r['source']}, {r['tuning_seconds']:.1f} s, {r['throughput']:,.0f}/s")
        rows.append(cells)
    t = nightly["totals"]
    rows.append(["**total**", "", *(f"**{t[p]['tuning_seconds']:.1f} s tuning, mean "
                                    f"{t[p]['throughput']['median']:,.0f}/s (median)**"
                                    for p in ("intune_cached", "intune_cold", "autotune"))])
    return md_table(["night", "change", "intune + cache", "intune cold every night",
                     "AUTOTUNE every night"], rows)


def training_table(training: dict) -> str:
    rows = []
    for case, r in training["cases"].items():
        for name in ("autotune", "intune"):
            rows.append([case, name, _fmt_range(r[name]["steps_per_s"], digits=2),
                         _fmt_range(r[name]["input_wait_fraction"], digits=2), r[name]["config"]])
    return md_table(["pipeline", "config", "DLRM steps/s", "input-wait fraction", "config"], rows)


def plot_real(real: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cases = real["cases"]
    fig, axes = plt.subplots(1, len(cases), figsize=(4.2 * len(cases), 3.8), squeeze=False)
    for ax, case in zip(axes[0], cases):
        names = [n for n in ORDER if n in case["methods"]]
        med = [case["methods"][n]["ratio_to_best"] for n in names]
        colors = ["tab:orange" if n.startswith("intune") else
                  "tab:red" if n == "autotune" else "tab:gray" for n in names]
        ax.barh(names, med, color=colors)
        ax.set_xlim(0, 1.05)
        ax.invert_yaxis()
        ax.set_title(f"{case['case']}: throughput / best", fontsize=10)
    fig.suptitle(f"{real['machine']['usable_cpus']:g} usable cores, {real['machine']['cpu_model']}",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_all(suffix: str = "", update_readme: bool = True) -> None:
    sections = []
    real, nightly, training = (_load(n + suffix) for n in ("real", "nightly", "training"))
    sim_md = RESULTS / f"sim{suffix}.md"
    if real:
        plot_real(real, RESULTS / f"real{suffix}.png")
        m = real["machine"]
        sections.append(f"### Real pipelines ({m['usable_cpus']:g} usable cores of {m['host_cpus']}, "
                        f"{m['ram_gib']} GiB, {m['cpu_model']}; {m['date']})\n\n"
                        f"Reproduce: `{real['command']}`\n\n{real_table(real)}\n"
                        f"![real pipelines](benchmarks/results/real{suffix}.png)\n")
    if nightly:
        sections.append(f"### Nightly retraining, 8 nights\n\nReproduce: `{nightly['command']}`\n\n"
                        f"{nightly_table(nightly)}\n")
    if training:
        sections.append(f"### Training-level effect (small DLRM)\n\nReproduce: `{training['command']}`"
                        f"\n\n{training_table(training)}\n")
    if sim_md.exists():
        sections.append(f"### Simulated machines\n\n{sim_md.read_text().strip()}\n")
    text = "\n".join(sections)
    (RESULTS / f"summary{suffix}.md").write_text(text + "\n")
    if update_readme and README.exists():
        readme = README.read_text()
        block = f"{START}\n{text}\n{END}"
        if START in readme and END in readme:
            readme = re.sub(re.escape(START) + r".*?" + re.escape(END), lambda _: block, readme,
                            flags=re.S)
            README.write_text(readme)


if __name__ == "__main__":
    write_all()
