"""``intune-flow bench``: runs the benchmarks in the repository's benchmarks/ folder."""

from __future__ import annotations

from ..errors import IntuneError


def register(sub):
    p = sub.add_parser("bench", help="benchmarks: every method side by side (python -m benchmarks)",
                       description="Same as `python -m benchmarks ARGS` from a checkout.")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="a few minutes (default)")
    mode.add_argument("--full", action="store_true", help="the thorough run")
    p.add_argument("--only", default=None, help="parts: real,nightly,training,sim")
    p.add_argument("--cases", default=None, help="real-pipeline cases, e.g. cpu,latency")
    p.add_argument("--label", default=None, help="suffix for result files (a machine name)")
    p.add_argument("--no-readme", action="store_true", help="do not refresh README.md")
    p.set_defaults(func=_run)


def _run(args) -> int:
    try:
        from benchmarks.__main__ import main
    except ImportError as exc:
        raise IntuneError("the benchmarks live in the repository's benchmarks/ folder, which this "
                          f"installation does not have ({exc}); run from a checkout installed "
                          "with `make setup`") from None
    argv = ["--full"] if args.full else ["--quick"]
    for flag in ("only", "cases", "label"):
        if getattr(args, flag):
            argv += [f"--{flag}", getattr(args, flag)]
    if args.no_readme:
        argv.append("--no-readme")
    return main(argv)
