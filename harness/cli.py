"""The ``kvbench`` console script: a thin dispatcher over harness.commands.*."""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys

from harness import roles
from harness.commands import COMMANDS, NEEDS, ROLE
from harness.errors import HarnessError
from mini_engine.errors import KVBenchError


class _Parser(argparse.ArgumentParser):
    # argparse already exits 2 with one usage line; keep that but make it one line.
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"kvbench: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kvbench", description="KV-cache accounting benchmark harness")
    parser.add_argument("--version", action="version", version=f"kvbench {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        importlib.import_module(f"harness.commands.{name}").register(sub)
    return parser


def version() -> str:
    """The installed distribution's version, or the source tree's when run from a checkout."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("kvbench")
    except PackageNotFoundError:
        return "unknown (not installed)"


def main(argv: list[str] | None = None) -> int:
    if sys.stdout is None:  # started with stdout closed (`>&-`): the output goes nowhere, the work still counts
        sys.stdout = open(os.devnull, "w")
    try:
        try:
            parser = build_parser()
        except KVBenchError as err:  # a KVBENCH_PLUGINS module that does not import
            print(f"kvbench: error: {err}", file=sys.stderr)
            return 2
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        try:
            # The role first: a command imports its packages only once they are known to be there.
            roles.check(args.command, ROLE[args.command], NEEDS.get(args.command, ()))
            code = int(args.func(args) or 0)
        except (KVBenchError, HarnessError) as err:
            print(f"kvbench: error: {err}", file=sys.stderr)
            code = 2
        except ImportError as err:
            # A package of the role that only this path imports (safetensors for a checkpoint):
            # the same one line. Any other ImportError is a bug and keeps its traceback.
            missing = roles.missing_extra(err, args.command, ROLE[args.command])
            if missing is None:
                raise
            print(f"kvbench: error: {missing}", file=sys.stderr)
            code = 2
        # Flush here, not at interpreter exit, so a closed pipe is seen while we can still handle it.
        sys.stdout.flush()
        return code
    except KeyboardInterrupt:
        print("kvbench: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`kvbench compare ... | head`): stop quietly, as `cat` does.
        # Point stdout at /dev/null so the interpreter's own flush at exit cannot raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE: what a shell reports for a writer killed by a closed pipe
    except OSError as err:
        # stdout on a full device or file system (`> /dev/full`, a quota): every file
        # kvbench writes says so itself (safe_write), so this is the terminal's output.
        if err.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO):
            raise
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        print(f"kvbench: error: the output cannot be written ({err.strerror})", file=sys.stderr)
        return 2
    except RecursionError:  # a JSON or TOML reader met a file nested deeper than Python recurses
        print("kvbench: error: an input file is nested too deeply to read", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
