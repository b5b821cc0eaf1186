"""``intune-flow``: the command line. Each subcommand lives in its own module with ``register(sub)``."""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys

from ..errors import IntuneError

# module name -> one-line help; each module defines register(subparsers) -> None
SUBCOMMANDS = ("data", "probe", "tune", "cache", "pretrain", "bench", "demo")


class _Parser(argparse.ArgumentParser):
    """An argument parser (its subcommands' too) that takes long options only as written:
    argparse's prefix matching would take ``tune --budget 20`` as ``--budget-s 20``, where
    ``tune(budget=20)`` is an error, and a prefix can change meaning when an option is
    added. An unknown option's error names the closest option of the subcommand given."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_args(self, args=None, namespace=None):
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            chosen = _subcommand(self, parsed)     # its usage, not the top level's
            known = _long_options(chosen)
            close = [m for arg in extras if arg.startswith("--")
                     for m in difflib.get_close_matches(arg.split("=")[0], known, n=1)]
            hint = f" (did you mean {', '.join(dict.fromkeys(close))}?)" if close else ""
            chosen.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        return parsed


def _subcommand(parser: argparse.ArgumentParser, parsed) -> argparse.ArgumentParser:
    """The parser of the (innermost) subcommand ``parsed`` chose."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(parsed, action.dest, None) or "")
            if chosen is not None:
                return _subcommand(chosen, parsed)
    return parser


def _long_options(parser: argparse.ArgumentParser) -> list[str]:
    """The long options ``parser`` takes."""
    return [o for action in parser._actions for o in action.option_strings
            if o.startswith("--")]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
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
