"""``intune-flow``: the command line. Each subcommand lives in its own module with ``register(sub)``."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from ..errors import IntuneError

# module name -> one-line help; each module defines register(subparsers) -> None
SUBCOMMANDS = ("data", "probe", "tune", "cache", "pretrain", "bench", "demo")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="intune-flow",
        description="RL tuning of DLRM input pipelines, with a per-schema policy cache.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in SUBCOMMANDS:
        importlib.import_module(f"{__name__}.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    # TensorFlow's C++ start-up chatter (oneDNN, CPU features) buries the CLI's own output.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except IntuneError as exc:
        print(f"intune-flow {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
