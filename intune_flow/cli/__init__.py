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
    added. An unknown option's error names the closest known one."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message):
        if message.startswith("unrecognized arguments:"):
            known = _option_strings(self)
            close = [m for arg in message.split(":", 1)[1].split() if arg.startswith("--")
                     for m in difflib.get_close_matches(arg.split("=")[0], known, n=1)]
            if close:
                message += f" (did you mean {', '.join(dict.fromkeys(close))}?)"
        super().error(message)


def _option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """The long options of ``parser`` and of its subcommands, all levels down."""
    found = []
    for action in parser._actions:
        found += [o for o in action.option_strings if o.startswith("--")]
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                found += _option_strings(sub)
    return list(dict.fromkeys(found))


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
