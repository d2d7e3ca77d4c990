"""kvbench history SUITE: per config and metric, the last N nights with their commits."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.core.errors import UsageError
from harness.core.markdown import code
from harness.core.metrics import check_metric_option
from harness.judge.rollup import rollup_lines
from harness.store.results import results_root


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("history", help="a suite's figures over the last nights, with the commit each moved at",
                       description="Reads the run directories of SUITE under --nights (each with results.jsonl "
                                   "and meta.json, as kvbench sweep writes them), oldest first, and shows the "
                                   "figures that moved from one night to the next with the commit range.")
    p.add_argument("suite", help="suite name, as in the runs' meta.json")
    p.add_argument("--nights", action="append", metavar="DIR",
                   help="a directory of run directories, or a results root holding runs/ (repeatable; "
                        "default: results/runs, or $KVBENCH_RESULTS/runs)")
    p.add_argument("--last", type=int, default=7, metavar="N", help="the newest N nights (default 7)")
    p.add_argument("--metric", action="append", metavar="NAME", help="show this metric (repeatable)")
    p.add_argument("--config", action="append", metavar="TEXT", help="configs whose test id or key contains TEXT")
    p.add_argument("--all", action="store_true", help="every metric, not only those that moved")
    p.add_argument("--format", choices=("text", "markdown"), default="text")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from harness.judge import history  # pydantic: only this command loads it, not the parser

    if args.last < 2:
        raise UsageError(f"--last must be an integer >= 2 (got {args.last})")

    check_metric_option(args.metric, "--metric", extra=("status",))
    roots = [Path(d) for d in args.nights] if args.nights else [results_root() / "runs"]
    nights = history.find_nights(roots, args.suite)
    if not nights:
        raise UsageError(f"--nights: no run of suite {args.suite!r} under {', '.join(map(str, roots))} (each "
                          f"night is a directory with results.jsonl and a meta.json naming the suite)")
    hist = history.build(nights[-args.last:])
    head = f"kvbench history {args.suite}: {len(hist.nights)} nights, oldest first"
    if args.format == "markdown":
        # the suite name is the user's text: a code span
        head = f"### kvbench history {code(args.suite)}: {len(hist.nights)} nights, oldest first\n"
    print(head)
    print(history.nights_text(hist, args.format))
    print(history.table(hist, metrics=args.metric, configs=args.config, show_all=args.all, fmt=args.format))

    moves = len({(m.key, m.metric) for m in hist.moves})
    count = {v: sum(m.verdict == v for m in hist.moves) for v in history.MOVED}
    rolled = rollup_lines(hist.moves, hist.configs(), args.format)
    if rolled:
        print("\n" + "\n".join(rolled))
    print(f"\n{moves} figures moved over {len(hist.nights)} nights ({count['regression']} regressions, "
          f"{count['improvement']} improvements, {count['changed']} changed)")
    return 0
