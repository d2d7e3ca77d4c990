"""The ``kvbench`` console script: a thin dispatcher over harness.commands.*."""

from __future__ import annotations

import argparse
import importlib
import sys

from harness.commands import COMMANDS
from mini_engine.errors import KVBenchError


class _Parser(argparse.ArgumentParser):
    # argparse already exits 2 with one usage line; keep that but make it one line.
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"kvbench: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kvbench", description="KV-cache accounting benchmark harness")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        importlib.import_module(f"harness.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KVBenchError as err:
        print(f"kvbench: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kvbench: interrupted", file=sys.stderr)
        return 130
    except RecursionError:  # a JSON or TOML reader met a file nested deeper than Python recurses
        print("kvbench: error: an input file is nested too deeply to read", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
