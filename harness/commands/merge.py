"""kvbench merge RUN_DIR... --run-id ID: the shards of one night joined into one run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.store.merge import merge
from harness.store.results import check_run_id, load_rows, results_root


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("merge", help="join the shards of one night (kvbench sweep --shard I/N) into one run",
                       description="Reads the run directories of every shard of one night (each written by "
                                   "kvbench sweep --shard I/N, e.g. unpacked from CI artifacts) and writes one "
                                   "run directory, results/runs/ID, that compare, history, report and ci triage "
                                   "read as one night. Refuses shards that overlap, are missing or differ in "
                                   "suite, commit, hardware profile, shard count or plan.")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="the shards' run directories")
    p.add_argument("--run-id", required=True, metavar="ID", help="the merged night's run id (a new directory "
                                                                 "under the results root's runs/)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from harness.grid.lifecycle import write_run_plots  # pydantic: only this command loads it, not the parser

    check_run_id(args.run_id)
    run_dir, notes = merge([Path(p) for p in args.runs], args.run_id, results_root())
    rows = load_rows(run_dir.path)
    plots = write_run_plots(rows, run_dir, lambda m: print(m, file=sys.stderr))
    for note in notes:
        print(f"kvbench: note: {note}", file=sys.stderr)
    meta = run_dir.meta()
    print(f"merged {len(args.runs)} shards of night {meta['merged']['night']} (suite {meta.get('suite')}, "
          f"commit {str(meta.get('git_commit'))[:10]}): {len(rows)} configs in {run_dir.path} ({len(plots)} plots)")
    return 0
