"""Progress reporting while tuning: a live line on a terminal, log lines otherwise, or a callback.

Off a terminal the lines go through ``logging`` (logger ``intune_flow.search``, INFO) when
the app has configured it, else plainly to stderr.

Events are dicts with at least ``event`` ("start", "measure", "rebase", "done"),
``method``, ``step``, ``config``, ``throughput``, ``best`` and ``status``; "done" also
carries ``best_mean`` and ``best_looks`` when the end-of-search re-measure chose the best,
``tie_broken`` when its tie rule did, and
``chosen_by`` (the rule that chose it: ``"race"``, ``"best window"``, either with
``", tie rule"``, or ``"race, start kept"``) where intune's end of search ran.
"""

from __future__ import annotations

import logging
import sys
from typing import Callable

log = logging.getLogger("intune_flow.search")

Progress = Callable[[dict], None]


def fmt_config(config: dict, limit: int = 70) -> str:
    """``config`` as ``knob=value`` words, cut to ``limit`` characters."""
    text = " ".join(f"{k}={v}" for k, v in config.items())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _tie_reason(tie: dict) -> str:
    """What the tie rule took the chosen config for (its ``tie_broken`` note)."""
    if "chosen_pool_threads" in tie:
        return (f"fewer pool threads on a busy CPU ({tie['chosen_pool_threads']:g}, not "
                f"{tie['instead_pool_threads']:g})")
    if "chosen_workers" in tie:
        return (f"fewer stage workers on a busy CPU ({tie['chosen_workers']:g} in all, not "
                f"{tie['instead_workers']:g})")
    if "chosen_rss" in tie:
        return (f"at most two thirds of the memory ({tie['chosen_rss'] / 2**20:,.0f} MiB, "
                f"not {tie['instead_rss'] / 2**20:,.0f} MiB)")
    return "fewer knobs at AUTOTUNE"


def format_event(ev: dict) -> str:
    """One human line for an event."""
    if ev["event"] == "start":
        budget = f", budget {ev['budget_s']:g} s" if ev.get("budget_s") else ""
        return (f"[{ev['method']}] start{budget}: measuring the start config "
                f"{fmt_config(ev.get('config', {}))}")
    if ev["event"] == "done":
        # After the end-of-search re-measure the best is the winner of those new looks, not
        # the highest window of the steps above: say so, with what the looks averaged.
        looks = (f"; chosen on {ev['best_looks']} new look(s) averaging {ev['best_mean']:,.0f}/s"
                 if ev.get("best_looks") else "")
        if str(ev.get("chosen_by", "")).endswith("tie rule"):
            tie = ev.get("tie_broken") or {}
            # The lead's figure too: a README-only trial read "best 29,858/s" beside a
            # 31,584/s window in the history and could not tell why.
            top = tie.get("top_mean") or tie.get("top_best")
            lead = f" ({top:,.0f}/s)" if top else ""
            looks += (f"; tie rule: a config within the noise of the best{lead} with "
                      + _tie_reason(tie))
        if ev.get("chosen_by") == "race, start kept":
            looks += "; the start kept: the candidates' new looks read below it"
        head = f"[{ev['method']}] done after {ev['step']} steps, {ev.get('elapsed', 0):.1f}s: "
        if ev.get("status", "ok") != "ok":
            return f"{head}no config ran (every probe failed; the first: {ev['status']})"
        return (f"{head}best {ev['best']:,.0f}/s ({ev.get('stopped', '')}{looks}) "
                f"{fmt_config(ev['config'])}")
    status = "" if ev.get("status", "ok") == "ok" else f" [{ev['status']}]"
    return (f"[{ev['method']}] step {ev['step']:>3} {ev.get('elapsed', 0):6.1f}s  "
            f"{ev.get('throughput', 0):>12,.0f}/s{status}  best {ev.get('best', 0):>12,.0f}/s  "
            f"{fmt_config(ev.get('config', {}))}")


class TerminalLine:
    """Rewrites one line in place (``\\r``), ending it when tuning is done."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.width = 0

    def __call__(self, ev: dict) -> None:
        text = format_event(ev)
        pad = max(0, self.width - len(text))
        self.width = len(text)
        end = "\n" if ev["event"] == "done" else ""
        self.stream.write("\r" + text + " " * pad + end)
        self.stream.flush()


def log_lines(ev: dict) -> None:
    """An INFO log line; plain stderr while the app has not configured logging.

    Unconfigured, Python's last-resort handler drops INFO and a batch job would show no
    progress; a library must not configure logging itself, so it writes the line instead.
    """
    if log.hasHandlers():
        log.info(format_event(ev))
    else:
        print(format_event(ev), file=sys.stderr, flush=True)


def make_progress(progress) -> Progress:
    """None: a live line on a terminal, else :func:`log_lines`; False: silent; a callable: it."""
    if progress is False:
        return lambda ev: None
    if callable(progress):
        return progress
    if progress is None or progress is True:
        stream = sys.stderr
        try:
            tty = stream.isatty()
        except (AttributeError, ValueError):
            tty = False
        return TerminalLine(stream) if tty else log_lines
    raise TypeError(f"progress must be None, False or a callable taking an event dict, got {progress!r}")
