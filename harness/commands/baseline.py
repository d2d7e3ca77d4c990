"""kvbench baseline RUN: write or update the baseline of the run's hardware profile."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.commands.compare import judged_run
from harness.core.safe_write import check_target
from harness.store.locks import LockBusy, run_lock
from harness.store.results import results_root, run_dir_of
from harness.view.mlflow_log import git_commit


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("baseline", help="bless a run as the baseline of its hardware profile")
    p.add_argument("run", help="run id, run directory or results.jsonl")
    p.add_argument("--out", metavar="FILE", help="baseline file (default results/baselines/<profile>.json)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # pydantic: only this command loads it, not the parser
    from harness.judge.baseline import build, default_path, load_baseline, write_baseline

    _not_held(args.run)
    rows, meta, profile = judged_run(args.run)
    out = Path(args.out) if args.out else default_path(profile, results_root())
    # Before reading it: a device node there (/dev/zero) would be read forever.
    existing = load_baseline(out, expected_profile=profile) if check_target(out, "--out") else None
    # The commit that produced the rows, not the one checked out now.
    base, added, updated, skipped = build(rows, profile, meta.get("git_commit") or git_commit(), existing)
    write_baseline(out, base)
    print(f"baseline {out} (profile {profile}): {len(base['configs'])} configs, {added} added, {updated} updated"
          + (f", {len(skipped)} failed configs not blessed" if skipped else ""))
    return 0


def _not_held(run: str) -> None:
    """A run a sweep still writes is not a baseline yet: 2 of 8 configs were blessed."""

    path = run_dir_of(run).path
    if not (path / "lock").is_file():
        return  # a copied run (an artifact) has no lock: nobody writes it
    try:
        run_lock(path).acquire().release()
    except LockBusy as err:
        raise LockBusy(f"run {path.name} is still being written: {err}") from None
