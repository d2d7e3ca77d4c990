"""kvbench replay TRACE: re-run an allocation trace on our allocator."""

from __future__ import annotations

import argparse

from mini_engine.algos import writers
from mini_engine.config.profiles import SGLANG_VERSIONS  # each profile's release, which a header must agree with


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "replay", help="re-run an allocation trace (--trace output) and report the first divergence",
        description="Re-run every allocator call of a kvbench allocation trace on a fresh allocator, "
                    "check each recorded out/available, and report the first divergence.")
    p.add_argument("trace", help="trace file (JSON lines, kvbench-trace header first)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # numpy: here, not at the top: replay needs only the memory layer, and building the parser must not need numpy.
    from mini_engine.memory.replay.run import replay

    report = replay(args.trace, writers(), SGLANG_VERSIONS)
    us = report.seconds_per_call * 1e6
    if report.divergences == 0:
        print(f"replayed {report.calls} calls, 0 divergences ({us:.1f} us/call host time)")
        return 0
    print(f"replayed {report.calls} calls, {report.divergences} divergences; "
          f"first: {report.first_divergence}")
    return 1
