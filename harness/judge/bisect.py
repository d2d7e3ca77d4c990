"""`kvbench bisect`: the first commit between a good and a bad one where a config moved.

The candidates are the first-parent commits of ``good..bad`` (oldest first). The
good commit's row is the reference; a candidate is *bad* when `kvbench compare`
of its row against that reference finds a regression (counters exactly, timings
by the significance rule, so timings need --repeat >= 2), *good* when it finds
none, and *skipped* when the config cannot run there (an option that commit does
not know yet, a crash). The search is a plain binary search that steps around
skipped commits; if skips hide the answer, the range that holds it is reported.

Running a commit is one function (``evaluate``: commit -> result row or None), so
the search is tested over recorded rows; ``WorktreeRunner`` is the real one: a
temporary git worktree per commit, the config written as a TOML file, and that
commit's own `kvbench run --config FILE --json OUT`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from harness.core.errors import HarnessError
from harness.judge.compare import compare_rows, reference_of_run
from harness.judge.repeats import merge_repeats

Row = dict[str, Any]
_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/^~@{}-]{0,199}$")


class BisectError(HarnessError):
    """The range cannot be bisected (the bad commit is not bad, the good one cannot run)."""


@dataclass
class Step:
    commit: str
    state: str  # good | bad | skip
    reason: str = ""


@dataclass
class Result:
    first_bad: str | None
    steps: list[Step] = field(default_factory=list)
    suspects: list[str] = field(default_factory=list)  # when skips leave several candidates


def git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise BisectError(f"git {' '.join(args)}: {(out.stderr.strip().splitlines() or ['failed'])[-1]}")
    return out.stdout.strip()


def resolve(repo: Path, ref: str, option: str) -> str:
    """The full commit id of a ref; refuses what could be read as a git option."""
    if not _REF.match(ref):
        raise BisectError(f"{option} must be a commit id or ref name (got {ref!r})")
    out = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise BisectError(f"{option} {ref!r} is not a commit of {repo}")
    return out.stdout.strip()


def candidates(repo: Path, good: str, bad: str) -> list[str]:
    """Commits after ``good`` up to and including ``bad``, oldest first."""
    if subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", good, bad],
                      capture_output=True, timeout=60).returncode != 0:
        raise BisectError(f"--good {good[:12]} is not an ancestor of --bad {bad[:12]}")
    commits = git(repo, "rev-list", "--first-parent", "--reverse", f"{good}..{bad}").split()
    if not commits:
        raise BisectError("--good and --bad are the same commit: nothing to bisect")
    return commits


def judge(reference: Row, row: Row | None, metrics: list[str] | None = None) -> Step:
    """Is ``row`` a regression against ``reference``? Only ``metrics`` when given."""
    if row is None:
        return Step("", "skip", "the config did not run")
    report = compare_rows([row], reference_of_run([reference], {}))
    moved = [f for f in report.gating if not metrics or f.metric in metrics or f.metric == "status"]
    if not moved:
        return Step("", "good")
    return Step("", "bad", "; ".join(f"{f.metric} {f.change}" for f in moved[:6]))


def search(commits: list[str], state: Callable[[str], Step]) -> Result:
    """Binary search for the first bad commit of ``commits``; the last one is known bad
    and the one before the first is known good."""
    result = Result(None)
    lo, hi = -1, len(commits) - 1  # lo: last known good index (-1: the good commit), hi: first known bad
    skipped: set[int] = set()
    while True:
        untested = [i for i in range(lo + 1, hi) if i not in skipped]
        if not untested:
            break
        mid = untested[len(untested) // 2]
        step = state(commits[mid])
        step.commit = commits[mid]
        result.steps.append(step)
        if step.state == "bad":
            hi = mid
        elif step.state == "good":
            lo = mid
        else:
            skipped.add(mid)
    between = [commits[i] for i in range(lo + 1, hi + 1)]
    if len(between) == 1:
        result.first_bad = between[0]
    else:
        result.suspects = between  # only skipped commits stand before the first known bad one
    return result


def bisect(commits: list[str], good: str, evaluate: Callable[[str], Row | None],
           metrics: list[str] | None = None, log: Callable[[str], None] = lambda s: None) -> Result:
    """``commits``: candidates after ``good``, oldest first, the bad one last."""
    reference = evaluate(good)
    if reference is None:
        raise BisectError(f"the config does not run at --good {good[:12]}: nothing to compare with")
    log(f"good {good[:12]}: reference row taken")
    bad = judge(reference, evaluate(commits[-1]), metrics)
    bad.commit = commits[-1]
    log(f"bad  {commits[-1][:12]}: {bad.state} {bad.reason}".rstrip())
    if bad.state != "bad":
        raise BisectError(f"--bad {commits[-1][:12]} is {bad.state} against --good {good[:12]} "
                          f"({bad.reason or 'no regression'}): nothing to bisect")

    def state(commit: str) -> Step:
        step = judge(reference, evaluate(commit), metrics)
        log(f"     {commit[:12]}: {step.state} {step.reason}".rstrip())
        return step

    result = search(commits, state)
    result.steps.insert(0, bad)
    return result


def to_toml(config: dict[str, Any]) -> str:
    """A flat table of scalars as TOML (None means "the default": left out)."""
    lines = []
    for key, value in config.items():
        if value is None:
            continue
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (int, float, str, list)):
            text = json.dumps(value)  # a JSON string, number or flat list is TOML too
        else:
            raise BisectError(f"config option {key!r} has a value TOML cannot hold here ({type(value).__name__})")
        lines.append(f"{key} = {text}")
    return "\n".join(lines) + "\n"


@dataclass
class WorktreeRunner:
    """Runs one config at a commit in a temporary worktree, ``repeat`` times."""
    repo: Path
    config: dict[str, Any]
    repeat: int = 1
    timeout_s: float = 1800.0
    python: str = sys.executable
    log: Callable[[str], None] = lambda s: None

    def __call__(self, commit: str) -> Row | None:
        with tempfile.TemporaryDirectory(prefix="kvbench-bisect-") as tmp:
            tree = Path(tmp) / "tree"
            git(self.repo, "worktree", "add", "--detach", "--quiet", str(tree), commit)
            try:
                return self._run(tree, Path(tmp))
            finally:
                subprocess.run(["git", "-C", str(self.repo), "worktree", "remove", "--force", str(tree)],
                               capture_output=True, timeout=120)

    def _run(self, tree: Path, tmp: Path) -> Row | None:
        cfg = tmp / "config.toml"
        cfg.write_text(to_toml(self.config))
        env = {**os.environ, "PYTHONPATH": str(tree)}
        rows = []
        for i in range(self.repeat):
            out = tmp / f"row{i}.json"
            try:
                proc = subprocess.run([self.python, "-m", "harness.cli", "run", "--config", str(cfg), "--json",
                                       str(out)], cwd=tree, env=env, capture_output=True, text=True,
                                      timeout=self.timeout_s)
            except subprocess.TimeoutExpired:  # a hanging candidate is one that cannot run the config
                self.log(f"     cannot run here: no result within --timeout {self.timeout_s:g} s")
                return None
            # 0: ran clean, 1: ran with violations or an exhausted pool (still a row); else it could not run.
            if proc.returncode not in (0, 1) or not out.is_file():
                self.log(f"     cannot run here: {(proc.stderr.strip().splitlines() or ['exit ' + str(proc.returncode)])[-1]}")
                return None
            rows.append(json.loads(out.read_text()))
        return merge_repeats(rows)
