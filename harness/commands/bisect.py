"""kvbench bisect --good SHA --bad SHA --config ID: the first commit where a config moved."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from harness.ci.text import code
from harness.core.errors import UsageError
from harness.core.safe_write import open_regular
from harness.run.runner import load_config_file


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bisect", help="find the first commit between --good and --bad where a config regressed",
                       description="Runs one config at commits of good..bad (first parent), each in a temporary "
                                   "git worktree, and names the first bad one. Counters decide exactly; timings "
                                   "by compare's significance rule (give --repeat >= 2 to judge them).")
    p.add_argument("--good", required=True, metavar="SHA", help="a commit where the config is fine")
    p.add_argument("--bad", required=True, metavar="SHA", help="a later commit where it regressed")
    p.add_argument("--config", required=True, metavar="ID",
                   help="a test id of --suite (kvbench sweep SUITE --list prints them), or a TOML file of options")
    p.add_argument("--suite", metavar="SUITE", help="the suite that defines --config (default: the one suite that has it)")
    p.add_argument("--metric", action="append", metavar="NAME",
                   help="judge only this metric (repeatable; default every counter and timing)")
    p.add_argument("--repeat", type=int, default=1, metavar="N", help="runs per commit (timings need >= 2; default 1)")
    p.add_argument("--timeout", type=float, default=1800.0, metavar="S",
                   help="seconds one run of the config may take at a commit before that commit counts as unable "
                        "to run it (default 1800)")
    p.add_argument("--repo", default=".", metavar="DIR", help="the git repository (default .)")
    p.add_argument("--summary", metavar="FILE", help="append the outcome as Markdown (e.g. \"$GITHUB_STEP_SUMMARY\")")
    p.set_defaults(func=run)


def config_of(ref: str, suite: str | None) -> tuple[dict, str]:
    """The options of a config named by test id (in --suite, or the one suite holding it) or a TOML file."""

    from harness.grid.suites import available, load_suite  # pydantic: only this command loads it, not the parser

    if ref.endswith(".toml") and Path(ref).is_file():
        return load_config_file(ref), ref
    names = [suite] if suite else available()
    found = [(name, load_suite(name).by_id().get(ref)) for name in names]
    found = [(name, gc) for name, gc in found if gc is not None]
    if not found:
        where = f"suite {suite}" if suite else f"any suite ({', '.join(names)})"
        raise UsageError(f"--config {ref!r} is not a test id of {where} nor a .toml file")
    if len({str(sorted(gc.config.items())) for _, gc in found}) > 1:
        raise UsageError(f"--config {ref!r} is a test id of several suites ({', '.join(n for n, _ in found)}); "
                         f"pass --suite")
    return dict(found[0][1].config), f"{found[0][0]}::{ref}"


def run(args: argparse.Namespace) -> int:
    from harness.judge import bisect  # pydantic: only this command loads it, not the parser

    from harness.schemas.suite import MAX_REPEAT  # pydantic: only this command loads it, not the parser

    if not 1 <= args.repeat <= MAX_REPEAT:  # a suite's repeat bound: more is a typo, not a measurement
        raise UsageError(f"--repeat must be an integer from 1 to {MAX_REPEAT} (got {args.repeat})")
    if not 1 <= args.timeout <= 86400:  # also refuses nan and inf
        raise UsageError(f"--timeout must be a number of seconds from 1 to 86400 (got {args.timeout})")
    repo = Path(args.repo)
    good = bisect.resolve(repo, args.good, "--good")
    bad = bisect.resolve(repo, args.bad, "--bad")
    config, name = config_of(args.config, args.suite)
    commits = bisect.candidates(repo, good, bad)
    print(f"kvbench bisect {name}: {len(commits)} commits after {good[:12]} up to {bad[:12]}", flush=True)
    runner = bisect.WorktreeRunner(repo, config, repeat=args.repeat, timeout_s=args.timeout, log=lambda s: print(s, flush=True))
    result = bisect.bisect(commits, good, runner, args.metric, log=lambda s: print(s, flush=True))
    if result.first_bad:
        subject = bisect.git(repo, "log", "-1", "--format=%s", result.first_bad)
        line = f"first bad commit: {result.first_bad} {subject}"
        why = next((s.reason for s in result.steps if s.commit == result.first_bad), "")
    else:
        line = f"the first bad commit is one of {len(result.suspects)} (the others could not run the config): " \
               + " ".join(c[:12] for c in result.suspects)
        why = ""
    print(line + (f"\n  {why}" if why else ""))
    if args.summary:
        try:
            with open(open_regular(args.summary, "--summary", os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a",
                      encoding="utf-8") as fh:
                fh.write(summary(name, good, bad, result, line, why))
        except OSError as err:
            raise UsageError(f"--summary {args.summary!r} cannot be written: {err.strerror or err}") from None
    return 0


def summary(name: str, good: str, bad: str, result, line: str, why: str) -> str:
    # code(): one code span no commit text or reason can break out of
    rows = [f"| {code(s.commit[:12])} | {s.state} | {code(s.reason) if s.reason else ''} |" for s in result.steps]
    return "\n".join([f"### kvbench bisect {code(name)}", "", f"{code(good[:12])}..{code(bad[:12])}: "
                      + code(line), "", "| commit | state | moved |", "|---|---|---|", *rows, ""]) + "\n"
