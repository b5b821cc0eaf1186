"""Shared benchmark plumbing: repeated interleaved measurement, robust stats, JSON/Markdown output."""

from __future__ import annotations

import json
import os
import platform
import re
import statistics
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def summary(values) -> dict:
    """Median with min and max of a list of numbers (empty -> zeros)."""
    values = [float(v) for v in values]
    if not values:
        return {"median": 0.0, "min": 0.0, "max": 0.0, "n": 0}
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values)}


def interleaved(measure, configs: dict, repeats: int, log=print, unit: str = "rec/s") -> dict:
    """Measure each named config ``repeats`` times, interleaved (A B C A B C ...).

    ``measure(config) -> Measurement``; returns name -> list of Measurement dicts. Interleaving
    spreads the machine's drift over every method instead of charging it to one. A config
    named twice (two methods that found the same config) is measured once per repeat and
    every name gets those measurements: measuring it twice would only show the noise as a
    difference between them.
    """
    from intune_flow.agent.walk import config_key
    owner: dict[tuple, str] = {}
    for name, config in configs.items():
        owner.setdefault(config_key(config), name)
    runs = {name: [] for name in owner.values()}
    for r in range(repeats):
        for name in runs:
            m = measure(configs[name])
            runs[name].append(m.to_dict())
            log(f"  repeat {r + 1}/{repeats} {name:<14} {m.throughput:>12,.2f} {unit}  "
                f"rss {m.peak_rss / 2**20:,.0f} MiB  {m.status}")
    return {name: list(runs[owner[config_key(config)]])
            for name, config in configs.items()}


def machine() -> dict:
    """What the benchmark ran on, for labelling every table."""
    import os

    from intune_flow.resources import usable_cpus
    import psutil
    return {"host_cpus": os.cpu_count(), "usable_cpus": usable_cpus(),
            "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "cpu_model": _cpu_model(), "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def cpu_times() -> dict:
    """The machine's CPU time counters so far (seconds by kind, ``steal`` among them on
    Linux), for :func:`steal_share` over a run."""
    import psutil
    return psutil.cpu_times()._asdict()


def steal_share(before: dict, after: dict) -> float | None:
    """The share of the machine's CPU time the hypervisor gave to other guests between two
    :func:`cpu_times` (Linux "steal"): a shared host's noise, which no config causes. None
    where steal is not reported or no time passed."""
    if "steal" not in before or "steal" not in after:
        return None
    total = sum(after.values()) - sum(before.values())
    return (after["steal"] - before["steal"]) / total if total > 0 else None


def noise_sentence(meta: dict, cases) -> str:
    """How noisy a run was, from its own figures: the median over every case's configs
    (``case["picks"]``) of their repeats' spread ((max - min) / median) and, where
    recorded, the host's steal share."""
    spreads = [s for case in cases for p in case["picks"].values()
               if (s := spread(p["throughput"])) is not None]
    if not spreads:
        return ""
    out = (f"Noise of this run: the repeats of a config spread a median of "
           f"{statistics.median(spreads):.0%} of its median (max - min)")
    steal = meta.get("steal_share")
    if steal is not None:
        out += (f"; the hypervisor gave {steal:.1%} of the machine's CPU time to other guests "
                f"(steal) during the run")
    return out + "."


def spread(s: dict) -> float | None:
    """(max - min) / median of a :func:`summary`; None for a zero median."""
    return (s["max"] - s["min"]) / s["median"] if s.get("median") else None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def replace_block(path: Path, start: str, end: str, text: str) -> None:
    """Rewrite what lies between the ``start`` and ``end`` marker lines of a Markdown file
    (``text`` ends with its own newline); nothing when the file or a marker is missing."""
    if not path.exists():
        return
    doc = path.read_text()
    if start in doc and end in doc:
        path.write_text(re.sub(re.escape(start) + r".*?" + re.escape(end),
                               lambda _: f"{start}\n{text}{end}", doc, flags=re.S))


def write_json(name: str, data: dict, out_dir: Path = RESULTS) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=False, default=str))
    tmp.replace(path)
    return path


def write_outputs(name: str, title: str, data: dict, table: str, plot, out_dir: Path,
                  readme: Path | None = None, markers: tuple[str, str] = ("", ""),
                  image: str | None = None) -> None:
    """``name``.json, ``name``.md (``table`` under ``title``) and ``name``.png
    (``plot(data, path)``) in ``out_dir``; with ``readme``, its block between ``markers``
    becomes ``table``. With ``image`` (its alt text), each of them ends on the plot, linked
    relative to the file that shows it."""
    png = out_dir / f"{name}.png"
    md = out_dir / f"{name}.md"

    def shown_in(doc: Path) -> str:
        return table if image is None else table + image_link(image, png, doc) + "\n\n"
    write_json(name, data, out_dir)
    md.write_text(f"# {title}\n\n" + shown_in(md))
    plot(data, png)
    if readme is not None:
        replace_block(readme, *markers, shown_in(readme))


def image_link(alt: str, png: Path, doc: Path) -> str:
    """Markdown showing ``png`` from ``doc``: the path relative to ``doc``'s folder, so the
    picture shows wherever the two files lie (a link from the repository's root breaks in
    benchmarks/results/*.md)."""
    rel = os.path.relpath(Path(png).resolve(), Path(doc).resolve().parent)
    return f"![{alt}]({Path(rel).as_posix()})"


def save_plot(fig, path: Path) -> None:
    """Lay out, write (110 dpi) and close a matplotlib figure."""
    import matplotlib.pyplot as plt
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def md_table(headers: list[str], rows: list[list]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)
