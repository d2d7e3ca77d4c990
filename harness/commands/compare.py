"""kvbench compare [A] B: regression verdicts of run B against a reference A.

A is a baseline file or any other run; with one argument the reference is the
baseline of the run's hardware profile (results/baselines/<profile>.json).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.core.errors import UsageError
from harness.run import hardware
from harness.store.results import results_root, run_dir_of, run_rows


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="compare a run with a baseline or another run; exit 1 on a regression",
                       description="kvbench compare RUN (against the baseline of its hardware profile) or "
                                   "kvbench compare A B (B judged against A: a run or a baseline file).")
    p.add_argument("runs", nargs="+", metavar="RUN",
                   help="run id, run directory or results.jsonl; with two, the first (or a baseline .json) is the reference")
    p.add_argument("--baseline", metavar="FILE", help="baseline file (default results/baselines/<profile>.json)")
    p.add_argument("--across-profiles", action="store_true",
                   help="compare runs of different hardware or accounting profiles: counters exactly, timings not at all")
    p.add_argument("--allow-missing", action="store_true",
                   help="configs of the reference that the run did not measure do not fail the compare")
    p.add_argument("--format", choices=("text", "markdown"), default="text")
    p.add_argument("--all", action="store_true", help="list unchanged figures too")
    p.set_defaults(func=run)


def judged_run(run: str) -> tuple[list[dict], dict, str]:
    """The rows, meta.json and hardware profile of the run a command judges (compare)
    or blesses (baseline); the profile is the one it ran on, else this machine's."""

    meta = run_dir_of(run).meta()
    rows = run_rows(run)
    profile = (meta.get("hardware") or {}).get("profile") or hardware.detect().profile
    return rows, meta, profile


def is_baseline_file(path: str) -> bool:
    return path.endswith(".json") and Path(path).is_file()


def reference(args: argparse.Namespace, profile: str) -> tuple[dict, str, str]:
    """(reference, its hardware profile, how to name it) for the judged run's profile."""
    # pydantic: only this command loads it, not the parser
    from harness.judge.baseline import default_path, load_baseline
    from harness.judge.compare import reference_of_run  # pydantic: only this command loads it, not the parser

    if len(args.runs) == 1:
        path = args.baseline or default_path(profile, results_root())
        base = load_baseline(path, expected_profile=None if args.across_profiles else profile)
        return base, str(base["profile"]), str(path)
    if args.baseline:
        raise UsageError("--baseline goes with one run; with two, the first run is the reference")
    a = args.runs[0]
    if is_baseline_file(a):
        base = load_baseline(a)
        return base, str(base["profile"]), a
    rows, meta, a_profile = judged_run(a)
    return reference_of_run(rows, meta), a_profile, a


def run(args: argparse.Namespace) -> int:
    from harness.grid.shards import selection  # pydantic: only this command loads it, not the parser
    # pydantic: only this command loads it, not the parser
    from harness.judge.compare import accounting_profiles, across, compare_rows

    if len(args.runs) > 2:
        raise UsageError(f"compare takes one run or two (got {len(args.runs)}): kvbench compare [A] B")
    b = args.runs[-1]
    rows, meta, profile = judged_run(b)
    ref, ref_profile, ref_name = reference(args, profile)
    ref_accounting = set(ref.get("accounting") or [])  # a baseline file does not record it
    hw_differ = ref_profile != profile
    acc_differ = "accounting" in ref and ref_accounting != accounting_profiles(rows)
    note = None
    if hw_differ or acc_differ:
        what = (f"hardware profile {ref_profile} vs {profile}" if hw_differ else
                f"accounting profile {_names(ref_accounting)} vs {_names(accounting_profiles(rows))}")
        if not args.across_profiles:
            raise UsageError(f"{ref_name} and {b} differ in {what}; pass --across-profiles to compare their "
                              f"counters (timings are then not comparable)")
        note = f"not comparable ({what})"
        rows, ref = across(rows, ref)
    # A filtered sweep, or a shard, did not miss what it left out.
    selected = selection(meta)
    report = compare_rows(rows, ref, selected=selected, timings_note=note)
    if len(args.runs) == 2:
        report.labels = ("A", "B")
    print(f"kvbench compare {b} against {ref_name} (profile {ref_profile}"
          + (f" vs {profile}" if hw_differ else "") + ")")
    print(report.table(args.format, all=args.all))
    if not report.judged:  # a gate that cannot judge fails (docs/harness.md)
        print(f"none of the {len(rows)} configs of {b} is in {ref_name}: nothing was judged: exit 2 "
              f"(compare with a reference of the same suite)")
        return 2
    missing = report.missing_configs
    if missing and not (args.allow_missing or selected):
        print(f"{len(missing)} configs of {ref_name} missing from {b}: exit 1 (pass --allow-missing if intended)")
        return 1
    lost = [f for f in report.findings if f.verdict == "missing" and f.metric != "*"]
    if lost:  # the summary counts them as missing; say why that fails the comparison
        print(f"{len(lost)} figures of {ref_name} vanished from {b} or are not numbers there: exit 1")
    if report.gating and all(f.verdict == "improvement" for f in report.gating):  # nothing lost, nothing worse
        print(f"only improvements: the baseline no longer holds, bless it with kvbench baseline {b}: exit 1")
    return 1 if report.regressed else 0


def _names(profiles: set[str]) -> str:
    return ",".join(sorted(profiles)) or "the default"
