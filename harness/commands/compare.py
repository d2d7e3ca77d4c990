"""kvbench compare RUN: regression verdicts against the baseline of the run's hardware."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="compare a run with a baseline; exit 1 on a regression")
    p.add_argument("run", help="run id, run directory or results.jsonl")
    p.add_argument("--baseline", metavar="FILE", help="baseline file (default results/baselines/<profile>.json)")
    p.add_argument("--format", choices=("text", "markdown"), default="text")
    p.add_argument("--all", action="store_true", help="list unchanged figures too")
    p.set_defaults(func=run)


def judged_run(run: str) -> tuple[list[dict], dict, str]:
    """The rows, meta.json and hardware profile of the run a command judges (compare)
    or blesses (baseline); the profile is the one it ran on, else this machine's."""
    from harness import hardware
    from harness.results import run_dir_of, run_rows

    meta = run_dir_of(run).meta()
    rows = run_rows(run)
    profile = (meta.get("hardware") or {}).get("profile") or hardware.detect().profile
    return rows, meta, profile


def run(args: argparse.Namespace) -> int:
    from harness.baseline import default_path, load_baseline
    from harness.compare import compare_rows
    from harness.results import results_root
    from harness.sweep import filter_selects

    rows, meta, profile = judged_run(args.run)
    path = args.baseline or default_path(profile, results_root())
    baseline = load_baseline(path, expected_profile=profile)
    expr = meta.get("filter")  # a filtered sweep did not miss what it left out
    report = compare_rows(rows, baseline, selected=filter_selects(expr) if expr else None)
    print(f"kvbench compare {args.run} against {path} (profile {profile})")
    print(report.table(args.format, all=args.all))
    return 1 if report.regressed else 0
