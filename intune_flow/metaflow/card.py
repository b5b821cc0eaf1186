"""The ``@intune`` card: throughput per tuning step, chosen vs. starting config, source, seconds.

Built only from the JSON-able record (``IntuneSession.to_dict()``), so what the card shows is
exactly what the ``intune_result`` artifact holds.
"""

from __future__ import annotations

import io
import json
from typing import Any

from ..knobs import AUTOTUNE
from ..result import versus_autotune_words

CARD_ID = "intune"
CARD_TYPE = "blank"


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        text = f"{value:,.1f}" if abs(value) >= 10 else f"{value:.2f}"
    else:
        text = str(value)
    return f"{text}{unit}"


def summary_rows(record: dict) -> list[list[str]]:
    """The key figures, one ``[name, value]`` row each."""
    start, chosen = record.get("start_throughput"), record.get("throughput")
    autotune = record.get("autotune_throughput")
    # The result's own figure: on a cache hit it is the night that tuned it, not today's
    # short probe over that night's AUTOTUNE.
    versus = record.get("vs_autotune") or (chosen / autotune if autotune and chosen else None)
    speedup = f"{chosen / start:.2f}x" if start and chosen else "-"
    rows = [
        ["pipeline", _fmt(record.get("pipeline"))],
        ["source", _fmt(record.get("source"))],
        ["tuning seconds", _fmt(record.get("tuning_seconds"), " s")],
        ["seconds saved", _fmt(record.get("seconds_saved"), " s")],
        ["throughput (chosen)", _fmt(chosen, " /s")],
        ["throughput (start)", _fmt(start, " /s")],
        ["speedup over start", speedup],
        ["vs AUTOTUNE", versus_autotune_words(versus, record.get("source")) or "not measured"],
        ["method", _fmt(record.get("method"))],
        ["cpu budget", _fmt(record.get("cpu_budget"))],
        ["ram budget", _fmt(_gib(record.get("ram_budget")))],
        ["cache", f"{_fmt(record.get('cache_uri') or record.get('cache'))} "
                  f"({record.get('cache_origin') or 'decorator'})"],
        ["cache key", _fmt(record.get("cache_key"))],
    ]
    for warning in record.get("warnings") or []:
        rows.append(["warning", str(warning)])
    if record.get("reason"):
        rows.insert(2, ["fallback reason" if record.get("source") == "fallback" else "note",
                        str(record["reason"])])
    return rows


def _gib(nbytes) -> str | None:
    return None if not nbytes else f"{nbytes / 2**30:.1f} GiB"


def config_rows(record: dict) -> list[list[str]]:
    """``[knob, start, chosen, busy]`` per knob; busy: how busy the stage's calls were when
    the chosen config was last measured (``-`` where the probe has no signal for it). A knob
    left to AUTOTUNE reads "AUTOTUNE", with the value AUTOTUNE held in that measurement
    where the probe read it."""
    chosen = record.get("config") or {}
    start = record.get("start_config") or {}
    last = next((m for m in reversed(record.get("history") or [])
                 if m.get("config") == chosen and m.get("status", "ok") == "ok"), {})
    busy, held = last.get("stage_signals") or {}, last.get("autotune_choices") or {}
    return [[name, _knob(start.get(name)), _knob(chosen.get(name), held.get(name)),
             f"{busy[name]:.0%}" if name in busy else "-"]
            for name in list(dict.fromkeys([*start, *chosen]))]


def _knob(value, held=None) -> str:
    if value == AUTOTUNE:
        return "AUTOTUNE" if held is None else f"AUTOTUNE ({held})"
    return _fmt(value)


def history_rows(record: dict) -> list[list[str]]:
    """``[step, config, throughput, status, seconds]`` per measurement of the tuning phase,
    numbered from 0 as the log's ``step N`` lines are (step 0: the start)."""
    rows = []
    for i, m in enumerate(record.get("history") or []):
        rows.append([str(i), json.dumps(m.get("config"), sort_keys=True),
                     _fmt(m.get("throughput"), " /s"), _fmt(m.get("status")),
                     _fmt(m.get("seconds"), " s")])
    return rows


def throughput_png(record: dict) -> bytes | None:
    """PNG of throughput per tuning step (None when nothing was measured)."""
    history = record.get("history") or []
    if not history:
        return None
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(7, 3.2), dpi=100)
    ax = fig.subplots()
    steps = list(range(len(history)))          # as the log and the table number them
    values = [float(m.get("throughput") or 0.0) for m in history]
    ok = [m.get("status", "ok") == "ok" for m in history]
    ax.plot(steps, values, color="#4477aa", lw=1, zorder=1)
    ax.scatter([s for s, k in zip(steps, ok) if k], [v for v, k in zip(values, ok) if k],
               color="#4477aa", s=18, label="measured", zorder=2)
    best, running = [], 0.0
    for v, k in zip(values, ok):
        running = max(running, v) if k else running
        best.append(running)
    ax.step(steps, best, where="post", color="#228833", lw=1, alpha=0.6, label="best so far")
    if not all(ok):
        ax.scatter([s for s, k in zip(steps, ok) if not k], [v for v, k in zip(values, ok) if not k],
                   color="#cc3311", marker="x", s=30, label="failed / over budget", zorder=3)
    if record.get("start_throughput"):
        ax.axhline(record["start_throughput"], color="#999999", ls="--", lw=1, label="start config")
    if record.get("throughput"):
        ax.axhline(record["throughput"], color="#228833", ls=":", lw=1.5, label="chosen config")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("tuning step")
    ax.set_ylabel("throughput (records/s)")
    ax.set_title(f"{record.get('pipeline')}: {record.get('source')}", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def components(record: dict) -> list:
    """The card's Metaflow components, top to bottom."""
    from metaflow.cards import Image, Markdown, Table

    out = [Markdown(f"## @intune: `{record.get('pipeline')}`"),
           Table(summary_rows(record), headers=["", ""])]
    if record.get("source") == "fallback":
        # the reason ends with the config the step ran with ("; using the cached config")
        out.append(Markdown(f"**Tuning fell back**: {record.get('reason') or 'unknown reason'}."))
    rows = config_rows(record)
    if rows:
        out += [Markdown("### Config: start vs. chosen"),
                Table(rows, headers=["knob", "start", "chosen", "busy at chosen"])]
    png = None
    try:
        png = throughput_png(record)
    except Exception as exc:  # a plotting problem must not cost the card
        out.append(Markdown(f"(throughput plot unavailable: {type(exc).__name__}: {exc})"))
    if png:
        out += [Markdown("### Throughput per tuning step"), Image(png, label="throughput per tuning step")]
    hist = history_rows(record)
    if hist:
        out.append(Table(hist, headers=["step", "config", "throughput", "status", "seconds"]))
    elif record.get("source") == "cache":
        out.append(Markdown("No tuning measurements this run: the config came from the cache."))
    return out


def add_to_card(record: dict, logger=print) -> bool:
    """Append the components to ``current.card['intune']``; False (and a log line) if no card."""
    try:
        from metaflow import current

        card = current.card[CARD_ID]
        for component in components(record):
            card.append(component)
        return True
    except Exception as exc:
        logger(f"[@intune] could not fill the card: {type(exc).__name__}: {exc}")
        return False


def add_note(text: str, logger=print) -> bool:
    """Append one Markdown paragraph to ``current.card['intune']``."""
    try:
        from metaflow import current
        from metaflow.cards import Markdown

        current.card[CARD_ID].append(Markdown(text))
        return True
    except Exception as exc:
        logger(f"[@intune] could not fill the card: {type(exc).__name__}: {exc}")
        return False
