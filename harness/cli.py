"""The ``kvbench`` console script: a thin dispatcher over harness.commands.* (whose package
builds the parser, so a command such as ``kvbench ci lint`` can parse argv without
importing this module)."""

from __future__ import annotations

import errno
import os
import sys

from harness.commands import NEEDS, ROLE, build_parser
from harness.core import roles
from harness.core.errors import HarnessError
from mini_engine.errors import KVBenchError


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
