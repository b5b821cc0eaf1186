"""``intune-flow tune PIPELINE``: tune a pipeline (with the cache) and print the result."""

from __future__ import annotations

import argparse
import json
import math


def register(sub):
    p = sub.add_parser("tune", help="tune a pipeline's knobs (warm-started from the cache)")
    p.add_argument("pipeline", help='factory as "package.module:function"')
    p.add_argument("--budget-s", type=float, default=60.0,
                   help="seconds a cold search may take (default 60; warm starts use less)")
    p.add_argument("--cache", default=None,
                   help="s3://BUCKET/PREFIX, a directory or memory:// "
                        "(default: $INTUNE_FLOW_CACHE or the user cache dir)")
    p.add_argument("--method", default="intune",
                   help="intune (default), ones, autotune, heuristic, hillclimb, random, optuna")
    p.add_argument("--cpu-budget", type=float, default=None, help="cores (default: usable cores)")
    p.add_argument("--ram-budget", default=None,
                   help='e.g. "4GiB" (default: this process\'s RSS plus half of the available '
                        'memory)')
    p.add_argument("--window-s", type=float, default=None,
                   help="measurement window per probe (default: 1/20 of the search's budget, "
                        "within 0.75-2 s)")
    p.add_argument("--timeout-s", type=_seconds, default=None, metavar="SECONDS",
                   help="abandon a probe that sees no element, or the factory's first build, "
                        "after this long (default: 30 s per probe, 60 s for the first build)")
    p.add_argument("--arg", action="append", default=[], metavar="KEY=VALUE",
                   help="keyword argument for the factory (value parsed as JSON if it can be)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--strict", action="store_true", help="fail instead of falling back")
    p.add_argument("--json", action="store_true", help="print the TuneResult as JSON")
    p.set_defaults(func=_run)


def _seconds(text: str) -> float:
    """``--timeout-s``: a positive, finite number of seconds (argparse reports anything else)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(
            f"timeout_s must be a positive number of seconds, got {text!r}; e.g. --timeout-s 30")
    return value


def _run(args) -> int:
    from ..tune import tune
    from .probe import _kwargs, format_config

    result = tune(args.pipeline, budget_s=args.budget_s, cpu_budget=args.cpu_budget,
                  ram_budget=args.ram_budget, cache=args.cache, method=args.method,
                  strict=args.strict, pipeline_kwargs=_kwargs(args.arg), window_s=args.window_s,
                  timeout_s=args.timeout_s, progress=False if args.json else None, seed=args.seed)
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
        return 0
    print(f"source      {result.source}" + (f"  ({result.reason})" if result.reason else ""))
    print(f"config      {format_config(result.config)}")
    print(f"throughput  {result.throughput:,.0f}/s (start {result.start_throughput:,.0f}/s)")
    print(f"tuning      {result.tuning_seconds:.1f}s"
          + (f" (saved {result.seconds_saved:.1f}s)" if result.seconds_saved else ""))
    print(f"cache       {result.cache_uri}  key {result.cache_key}")
    for warning in result.warnings:
        print(f"warning     {warning}")
    return 0
