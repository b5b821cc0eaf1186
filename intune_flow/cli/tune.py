"""``intune-flow tune PIPELINE``: tune a pipeline (with the cache) and print the result.

Its flags are :class:`~intune_flow.options.TuneOptions`' arguments for the ``cli`` surface
(``--budget-s`` for ``budget_s``, ...), passed on as text: the options object coerces and
checks them like every other surface's.
"""

from __future__ import annotations

import json

from ..options import TuneOptions

_OWN_SYNTAX = ("pipeline", "pipeline_kwargs", "strict")   # positional, --arg, a switch


def register(sub):
    p = sub.add_parser("tune", help="tune a pipeline's knobs (warm-started from the cache)")
    p.add_argument("pipeline", help='factory as "package.module:function"')
    defaults = TuneOptions.defaults("cli")
    for name in TuneOptions.names("cli"):
        if name in _OWN_SYNTAX:
            continue
        default = defaults[name]
        shown = f" (default {default})" if default is not None else ""
        p.add_argument("--" + name.replace("_", "-"), default=None, metavar=name.upper(),
                       help=TuneOptions.doc(name) + shown)
    p.add_argument("--arg", action="append", default=[], metavar="KEY=VALUE",
                   help="keyword argument for the factory (value parsed as JSON if it can be)")
    p.add_argument("--strict", action="store_true", help=TuneOptions.doc("strict"))
    p.add_argument("--json", action="store_true", help="print the TuneResult as JSON")
    p.set_defaults(func=_run)


def _flag(name: str) -> str:
    """How the command line spells argument ``name`` (the prefix of its error messages)."""
    return {"": "", "pipeline": "PIPELINE", "pipeline_kwargs": "--arg"}.get(
        name, "--" + name.replace("_", "-"))


def _run(args) -> int:
    from ..tune import tune
    from .probe import _kwargs, format_config

    given = {name: getattr(args, name) for name in TuneOptions.names("cli")
             if name not in _OWN_SYNTAX and getattr(args, name) is not None}
    options = TuneOptions.parse({"pipeline": args.pipeline, **given, "strict": args.strict,
                                 "pipeline_kwargs": _kwargs(args.arg)},
                                where=_flag, surface="cli")
    result = tune(options.pipeline, **{**options.tune_kwargs(),
                                       "progress": False if args.json else None})
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
        return 0
    print(f"source      {result.source}" + (f"  ({result.reason})" if result.reason else ""))
    print(f"config      {format_config(result.config) or 'the factory defaults'}")
    versus = f", {v}" if (v := result.versus_autotune()) else ""
    print(f"throughput  {result.throughput:,.0f}/s (start {result.start_throughput:,.0f}/s"
          f"{versus})")
    print(f"tuning      {result.tuning_seconds:.1f}s"
          + (f" (saved {result.seconds_saved:.1f}s)" if result.seconds_saved else ""))
    if result.worker_pool:
        cost = f", ${result.cost_per_million:.4f} per M records" if result.cost_per_million else ""
        print(f"workers     {result.workers} of {result.worker_pool}{cost}")
    print(f"cache       {result.cache_uri}  key {result.cache_key}")
    for warning in result.warnings:
        print(f"warning     {warning}")
    return 0
