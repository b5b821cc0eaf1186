"""Markdown tables and PNG plots from the benchmark JSON; refreshes the README's performance block.

Every number shown comes from benchmarks/results/*.json, written by ``python -m benchmarks``.
"""

from __future__ import annotations

import json
from pathlib import Path

from .common import RESULTS, image_link, md_table, replace_block

README = Path(__file__).resolve().parent.parent / "README.md"
BENCH_README = Path(__file__).resolve().parent / "README.md"
START, END = "<!-- bench:start -->", "<!-- bench:end -->"
ORDER = ("ones", "autotune", "heuristic", "hillclimb", "random", "optuna", "intune_cold",
         "intune_warm", "best_found")


def _load(name: str):
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _fmt_range(s: dict, scale: float = 1.0, digits: int = 0) -> str:
    f = f"{{:,.{digits}f}}"
    return f"{f.format(s['median'] / scale)} ({f.format(s['min'] / scale)}-{f.format(s['max'] / scale)})"


def second_pass_cell(row: dict) -> str:
    """A method's share of the winner in the second pass, with its 90% interval."""
    ratio, ci = row.get("ratio_to_winner_2nd"), row.get("ratio_to_winner_2nd_ci")
    if ratio is None:
        return "-"
    return f"{ratio:.2f}" if not ci else f"{ratio:.2f} ({ci[0]:.2f}-{ci[1]:.2f})"


def real_table(real: dict) -> str:
    out = []
    for case in real["cases"]:
        rows = []
        for name in ORDER:
            r = case["methods"].get(name)
            if r is None:
                continue
            rows.append([name, _fmt_range(r["throughput"]), f"{r['ratio_to_best']:.2f}",
                         second_pass_cell(r),
                         "-" if r["ratio_to_autotune"] is None else f"{r['ratio_to_autotune']:.2f}",
                         "-" if r.get("tuning_seconds") is None else f"{r['tuning_seconds']:.1f}",
                         f"{r['peak_rss_mib']['median']:,.0f}",
                         r["ram_violations"] + r.get("search_violations", 0), r["crashes"]])
        headroom = case.get("ram_headroom_mib")
        ram = (f"RAM budget {headroom} MiB over the process's RSS at the start of each search and "
               f"of the side-by-side run ({case['ram_budget_bytes'] / 2**30:.2f} GiB there)"
               if headroom else f"RAM budget {case['ram_budget_bytes'] / 2**30:.2f} GiB")
        out.append(f"**{case['case']}** - {case['kind']} (`{case['ref']}`, {ram}, "
                   f"search budget {case['budget_s']:g} s, "
                   f"{case['repeats']} interleaved repeats of {case['window_s']:g} s)\n")
        out.append(md_table(["method", "records/s median (min-max)", "vs best",
                             "vs winner, 2nd pass", "vs AUTOTUNE", "tuning s", "peak RSS MiB",
                             "RAM violations", "crashes"], rows))
        second = case.get("second_pass")
        if second:
            out.append(f"\n2nd pass: the winner of the run above ({second['winner']}) measured "
                       f"again against each searching method's config, {second['repeats']} "
                       f"interleaved rounds; the winner read "
                       f"{_fmt_range(second['throughput'])} records/s. A method's share is "
                       f"the median over rounds of its figure over the winner's in the same "
                       f"round, with a 90% bootstrap interval: one that holds 1.00 cannot "
                       f"be told from the winner.")
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
    real, nightly, training = (_load(n + suffix) for n in ("real", "nightly", "training"))
    warm = _load("warm_start") if not suffix else None
    png = RESULTS / f"real{suffix}.png"
    if real:
        plot_real(real, png)
    summary = RESULTS / f"summary{suffix}.md"
    summary.write_text(_sections(real, nightly, training, warm, suffix, png, summary) + "\n")
    if update_readme:
        replace_block(BENCH_README, START, END,
                      _sections(real, nightly, training, warm, suffix, png, BENCH_README) + "\n")
        replace_block(README, START, END, headline(real, nightly, training, suffix, warm) + "\n")


def _sections(real, nightly, training, warm, suffix: str, png, doc: Path) -> str:
    """The full tables, as ``doc`` shows them (its link to the plot relative to it)."""
    sections = []
    sim_md = RESULTS / f"sim{suffix}.md"
    if real:
        m = real["machine"]
        sections.append(f"### Real pipelines ({m['usable_cpus']:g} usable cores of {m['host_cpus']}, "
                        f"{m['ram_gib']} GiB, {m['cpu_model']}; {m['date']})\n\n"
                        f"Reproduce: `{real['command']}`\n\n{real_table(real)}\n"
                        f"{image_link('real pipelines', png, doc)}\n")
    if nightly:
        sections.append(f"### Nightly retraining, 8 nights\n\nReproduce: `{nightly['command']}`\n\n"
                        f"{nightly_table(nightly)}\n")
    if training:
        sections.append(f"### Training-level effect (small DLRM)\n\nReproduce: `{training['command']}`"
                        f"\n\n{training_table(training)}\n")
    if warm:
        sections.append(f"### Warm start through S3\n\nReproduce: `{warm['command']}`\n\n"
                        f"{warm_sentence(warm)}\n")
    if sim_md.exists():
        body = sim_md.read_text().strip()
        body = body.split("\n", 1)[1].strip() if body.startswith("# ") else body
        sections.append(f"### Simulated machines\n\n{body}\n")
    return "\n".join(sections)


def warm_sentence(warm: dict) -> str:
    med = warm["medians"]
    return (f"Tuning `{warm['pipeline']}` cold (`budget_s={warm['budget_s']:g}`) and then warm, "
            f"each night a new process, through {warm['store']}: the warm night's tuning took "
            f"{med['tuning_ratio']['median']:.1%} of the cold night's (median of "
            f"{med['tuning_ratio']['n']}; {med['tuning_ratio']['min']:.1%}-"
            f"{med['tuning_ratio']['max']:.1%}; {med['warm_tuning_seconds']['median']:.1f} s vs "
            f"{med['cold_tuning_seconds']['median']:.1f} s) and its config delivered "
            f"{med['throughput_ratio']['median']:.1%} of the cold config's throughput "
            f"(warm sources: {', '.join(sorted(set(med['warm_sources'])))}; "
            f"{warm['machine']['date']}).")


def headline(real, nightly, training, suffix: str = "", warm=None) -> str:
    """The README's short performance section: one row per real pipeline, plus the economics."""
    out = []
    if real:
        m = real["machine"]
        out.append(f"Measured on {m['usable_cpus']:g} usable cores ({m['cpu_model']}, {m['ram_gib']} "
                   f"GiB), {m['date']}, with `{real['command']}`: each method's config measured "
                   f"side by side, interleaved, median of {real['cases'][0]['repeats']} repeats (a "
                   "config several methods chose is measured once). "
                   "Full tables (min-max, RSS, RAM violations, every baseline): "
                   "[benchmarks/README.md](benchmarks/README.md).\n")
        rows = []
        for case in real["cases"]:
            ms = case["methods"]
            def cell(name, key="ratio_to_best"):
                r = ms.get(name)
                return "-" if r is None or r.get(key) is None else f"{r[key]:.2f}"
            tun = ms.get("intune_cold", {})
            hit = ms.get("intune_warm", {})
            rows.append([case["case"], case["kind"], cell("autotune"), cell("optuna"),
                         cell("intune_cold"), cell("intune_warm"),
                         second_pass_cell(ms.get("optuna", {})),
                         second_pass_cell(ms.get("intune_cold", {})),
                         cell("intune_cold", "ratio_to_autotune"),
                         f"{tun.get('tuning_seconds', 0):.1f} / {hit.get('tuning_seconds', 0):.1f}",
                         ms.get("autotune", {}).get("ram_violations", "-")])
        out.append(md_table(["pipeline", "bound by", "AUTOTUNE", "Optuna", "intune cold",
                             "intune warm", "2nd pass: Optuna", "2nd pass: intune",
                             "intune / AUTOTUNE", "tuning s cold / warm",
                             "AUTOTUNE RAM violations"], rows))
        out.append("\nColumns AUTOTUNE .. intune warm: throughput as a share of the best config "
                   "any method found (1.00 = the best). 2nd pass: that best config measured "
                   "again against Optuna's and intune's, so that the noise which crowned it "
                   "does not also count against the others: median share over paired rounds, "
                   "with its 90% interval (see benchmarks/README.md).\n")
        out.append(image_link("real pipelines", RESULTS / f"real{suffix}.png", README) + "\n")
    if nightly:
        t = nightly["totals"]
        out.append(f"**Eight nights** (night 4 on half the cores, night 6 a changed schema; "
                   f"`{nightly['command']}`): tuning seconds in total, intune with its cache "
                   f"{t['intune_cached']['tuning_seconds']:.0f} s vs. tuning cold every night "
                   f"{t['intune_cold']['tuning_seconds']:.0f} s; median delivered throughput "
                   f"{t['intune_cached']['throughput']['median']:,.0f} vs. "
                   f"{t['intune_cold']['throughput']['median']:,.0f} vs. AUTOTUNE "
                   f"{t['autotune']['throughput']['median']:,.0f} records/s.\n")
    if warm:
        out.append(f"**Warm start** (`{warm['command']}`): {warm_sentence(warm)}\n")
    if training:
        parts = []
        for case, r in training["cases"].items():
            parts.append(f"{case}: {r['autotune']['steps_per_s']['median']:.2f} -> "
                         f"{r['intune']['steps_per_s']['median']:.2f} steps/s, input wait "
                         f"{r['autotune']['input_wait_fraction']['median']:.0%} -> "
                         f"{r['intune']['input_wait_fraction']['median']:.0%}")
        out.append("**Training the small DLRM** on the AUTOTUNE config vs. the intune config: "
                   + "; ".join(parts) + ".\n")
    return "\n".join(out)


if __name__ == "__main__":
    write_all()
