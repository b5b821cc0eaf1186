"""``intune-flow probe PIPELINE --config ...``: measure one config of a pipeline."""

from __future__ import annotations

import json


def register(sub):
    p = sub.add_parser("probe", help="measure a pipeline at one config (records/s, CPU, RSS)")
    p.add_argument("pipeline", help='factory as "package.module:function"')
    p.add_argument("--config", default="defaults",
                   help='"read=4,parse=2" (others at default; a value may be "autotune"), '
                        '"ones", "autotune" or "defaults" (default)')
    p.add_argument("--arg", action="append", default=[], metavar="KEY=VALUE",
                   help="keyword argument for the factory (value parsed as JSON if it can be)")
    p.add_argument("--window-s", type=float, default=3.0, help="measurement window (default 3)")
    p.add_argument("--warmup-s", type=float, default=0.5,
                   help="seconds discarded after the first element, before the window (default 0.5)")
    p.add_argument("--timeout-s", type=float, default=30.0,
                   help="seconds without a new element before the probe gives up (default 30)")
    p.add_argument("--ram-budget", default=None,
                   help='e.g. "4GiB" (default: this process\'s RSS plus half of the available '
                        'memory)')
    p.add_argument("--cpu-budget", type=float, default=None, help="cores (default: usable cores)")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="measure N times and print the spread across windows: how noisy this "
                        "pipeline's throughput is on this machine (default 1)")
    p.add_argument("--json", action="store_true", help="print the Measurement as JSON")
    p.set_defaults(func=_run)


def parse_config(text: str, space) -> dict:
    """``ones`` | ``autotune`` | ``defaults`` | ``name=value,...`` -> a config dict."""
    from ..errors import KnobError
    from ..knobs import AUTOTUNE

    text = text.strip()
    if text in ("ones", "autotune", "defaults"):
        return getattr(space, text)()
    config = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep:
            raise KnobError(f"config item {item!r} is not NAME=VALUE; write e.g. read=4,parse=2 "
                            "or one of: ones, autotune, defaults")
        value = value.strip()
        try:
            config[name.strip()] = AUTOTUNE if value.lower() == "autotune" else int(value)
        except ValueError:
            raise KnobError(f"knob {name.strip()!r} needs an integer or 'autotune', "
                            f"got {value!r}") from None
    return config


def format_config(config) -> str:
    """A config as ``name=value,...``, the form ``--config`` reads (AUTOTUNE as ``autotune``)."""
    from ..knobs import AUTOTUNE

    return ",".join(f"{k}={'autotune' if v == AUTOTUNE else v}" for k, v in config.items())


def _kwargs(items) -> dict:
    from ..errors import IntuneError

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise IntuneError(f"--arg {item!r} is not KEY=VALUE")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def _run(args) -> int:
    from ..errors import IntuneError
    from ..pipeline import Pipeline
    from ..probe import probe
    from ..resources import parse_bytes, usable_cpus

    if args.repeat < 1:
        raise IntuneError(f"--repeat must be at least 1, got {args.repeat}; e.g. --repeat 10")
    pipeline = Pipeline.load(args.pipeline, **_kwargs(args.arg))
    config = parse_config(args.config, pipeline.space)
    try:
        ram = parse_bytes(args.ram_budget) if args.ram_budget else None
    except ValueError as exc:
        raise IntuneError(f"--ram-budget: {exc}") from None
    if not args.json:
        asked = pipeline.space.validate(config)
        ran = pipeline.resolve(asked, args.cpu_budget)
        # torchdata and the DataLoader have no AUTOTUNE: say what it stood for here
        runs_as = f" (runs as {format_config(ran)})" if ran != asked else ""
        print(f"{pipeline.name} [{pipeline.framework}] config {format_config(asked)}{runs_as}",
              flush=True)
    runs = []
    for i in range(args.repeat):
        runs.append(probe(pipeline, config, window_s=args.window_s, warmup_s=args.warmup_s,
                          timeout_s=args.timeout_s, ram_budget=ram, cpu_budget=args.cpu_budget))
        if args.repeat > 1 and not args.json:
            print(f"  window {i + 1}/{args.repeat}: {runs[-1].status} "
                  f"{runs[-1].records_per_s:,.0f} records/s", flush=True)
    m = runs[-1]
    if args.json:
        print(json.dumps(m.to_dict() if args.repeat == 1 else [r.to_dict() for r in runs],
                         indent=1))
    else:
        if args.repeat > 1:
            print(_spread_line(runs))
        print(f"  status {m.status}: {m.records_per_s:,.0f} records/s, "
              f"{m.elements_per_s:,.1f} elements/s (spread {m.spread:.2f}), "
              f"CPU {m.cpu_util:.0%} of {args.cpu_budget or usable_cpus():g} cores"
              f"{_others(m)}, "
              f"peak RSS {m.peak_rss / 2**20:,.0f} MiB, {m.seconds:.1f} s")
        if m.stage_signals:
            busy = ", ".join(f"{k} {v:.0%}" for k, v in m.stage_signals.items())
            print(f"  busy share of each stage's calls: {busy}")
        if m.autotune_choices:
            chose = ",".join(f"{k}={v}" for k, v in m.autotune_choices.items())
            print(f"  AUTOTUNE held {chose}")
        if m.error:
            print(f"  {m.error}")
    return 0 if all(r.ok for r in runs) else 1


def _spread_line(runs) -> str:
    """Median and range of the windows that measured: the noise a tuner has to see through."""
    import statistics

    rates = [r.records_per_s for r in runs if r.ok]
    if not rates:
        return f"  no window of {len(runs)} measured"
    med = statistics.median(rates)
    lo, hi = min(rates), max(rates)
    rel = f" ({lo / med - 1:+.0%} / {hi / med - 1:+.0%} of the median)" if med > 0 else ""
    return (f"  {len(rates)} windows: median {med:,.0f} records/s, "
            f"range {lo:,.0f}-{hi:,.0f}{rel}; the last window in detail:")


def _others(m) -> str:
    """What other processes took of the budget's cores, where it showed."""
    if m.others_busy < 0.05:
        return ""
    return f" ({m.machine_busy:.0%} busy counting other processes)"
