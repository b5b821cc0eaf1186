"""The nightly flow's end-of-run summary: training speed next to what the tuning phase cost."""

from __future__ import annotations

SUMMARY_FIELDS = (
    # key, label, format
    ("steps_per_s", "training steps/s", "{:.2f}"),
    ("input_wait_fraction", "input wait (share of step time)", "{:.1%}"),
    ("records_per_s", "training records/s", "{:,.0f}"),
    ("tuning_source", "tuning source", "{}"),
    ("tuning_seconds", "tuning seconds", "{:.1f}"),
    ("seconds_saved", "seconds saved by the cache", "{:.1f}"),
    ("pipeline_throughput", "pipeline records/s (tuned config)", "{:,.0f}"),
    ("vs_autotune", "times AUTOTUNE", "{:.1f}x"),
    ("config", "config", "{}"),
    ("workers", "data workers (scale-out)", "{}"),
    ("cost_per_million", "$ per M records (scale-out)", "{:.4f}"),
)


def summarize(intune_result: dict, train_stats: dict) -> dict:
    """One flat, JSON-able dict from the ``intune_result`` and ``train_stats`` artifacts."""
    return {
        "steps": train_stats.get("steps"),
        "steps_per_s": train_stats.get("steps_per_s"),
        "records_per_s": train_stats.get("records_per_s"),
        "input_wait_fraction": train_stats.get("input_wait_fraction"),
        "final_loss": train_stats.get("final_loss"),
        "tuning_source": intune_result.get("source"),
        "tuning_reason": intune_result.get("reason"),
        "tuning_seconds": intune_result.get("tuning_seconds"),
        "seconds_saved": intune_result.get("seconds_saved"),
        "pipeline_throughput": intune_result.get("throughput"),
        "vs_autotune": intune_result.get("vs_autotune") or _ratio(
            intune_result.get("throughput"), intune_result.get("autotune_throughput")),
        "config": intune_result.get("config"),
        "workers": intune_result.get("workers") if intune_result.get("worker_pool") else None,
        "cost_per_million": intune_result.get("cost_per_million"),
    }


def _ratio(value, reference) -> float | None:
    return value / reference if value and reference else None


def _cell(fmt: str, value) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items())
    try:
        return fmt.format(value)
    except (TypeError, ValueError):
        return str(value)


def format_summary(summary: dict) -> str:
    """The summary as aligned ``label: value`` lines."""
    width = max(len(label) for _, label, _ in SUMMARY_FIELDS)
    lines = ["nightly retraining summary"]
    for key, label, fmt in SUMMARY_FIELDS:
        lines.append(f"  {label:<{width}}  {_cell(fmt, summary.get(key))}")
    if summary.get("tuning_reason"):
        lines.append(f"  {'why':<{width}}  {summary['tuning_reason']}")
    return "\n".join(lines)


def format_side_by_side(columns: dict[str, dict], extra=()) -> str:
    """Several summaries (e.g. night 1 and night 2) as one table, one column each;
    ``extra`` adds ``(key, label, format)`` rows after the standard ones."""
    fields = (*SUMMARY_FIELDS, *extra)
    names = list(columns)
    width = max(len(label) for _, label, _ in fields)
    cells = {n: [_cell(fmt, columns[n].get(key)) for key, _, fmt in fields] for n in names}
    col_w = {n: max(len(n), *(len(c) for c in cells[n])) for n in names}
    lines = [" " * (width + 2) + "  ".join(f"{n:>{col_w[n]}}" for n in names)]
    for i, (_, label, _) in enumerate(fields):
        lines.append(f"{label:<{width}}  " + "  ".join(f"{cells[n][i]:>{col_w[n]}}" for n in names))
    return "\n".join(lines)
