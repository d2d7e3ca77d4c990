"""The sweep judges itself: its rows against the baseline and the run before.

A sweep whose every config ran as expected can still have moved: a reservation
three blocks wide instead of two passes every per-config expectation and shows
only against a reference. So when a sweep ends it compares itself with

* the hardware profile's baseline (``<results root>/baselines/<profile>.json``),
* the previous run of the same suite on the same hardware profile (the newest
  earlier run under the results root, or under ``--nights DIR``),

prints one verdict line per reference and the roll-up of what moved, writes
``compare.md`` and ``report.html`` into the run directory, and tags the MLflow
parent ``kvbench.compare = regressed|changed|improved|clean`` (the worst of the
two) with both files attached. With no reference at all there is nothing to judge
and no tag. ``--fail-on-regression`` makes a regression the sweep's exit status
and closes the parent FAILED.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.causes import one_line
from harness.core.errors import HarnessError
from harness.core.markdown import prose
from harness.core.metrics import TREND_METRICS
from harness.grid.shards import selection
from harness.judge import history
from harness.judge.baseline import BaselineError, default_path, load_baseline
from harness.judge.compare import CompareReport, compare_rows, reference_of_run
from harness.judge.rollup import ORDER, rollup_lines
from harness.store.results import RESULTS, RunDir, check_figures, load_rows, replace_text
from harness.view import report as report_view
from harness.view.mlflow_log import client

WORST_FIRST = ("regressed", "changed", "improved", "clean")
TAG = "kvbench.compare"
MOVED = "kvbench.moved"  # the worst roll-up line: what moved, by how much, where
NOTE, NOTE_RULE = "mlflow.note.content", "\n\n---\n\n"  # the parent's description: the verdict, a rule, the rest


@dataclass
class Judgement:
    reports: list[tuple[str, CompareReport]] = field(default_factory=list)  # (what it is against, the compare)
    baseline: dict[str, Any] | None = None
    previous: Path | None = None
    notes: list[str] = field(default_factory=list)  # references that could not be read
    unjudged: list[str] = field(default_factory=list)  # why the gate cannot judge: a reference unreadable, or none

    @property
    def direction(self) -> str:
        """The worst direction over the references; "" when there was none."""
        seen = {r.direction for _, r in self.reports}
        return next((d for d in WORST_FIRST if d in seen), "")

    @property
    def regressed(self) -> bool:
        return self.direction == "regressed"

    def lines(self) -> list[str]:
        if not self.reports:
            return [*self.notes, "compare: no baseline for this hardware profile and no earlier run of the suite: "
                                 "nothing to judge against"]
        return list(self.notes) + self._rolled("text")

    def _rolled(self, fmt: str) -> list[str]:
        """Per reference its verdict line and the roll-up of what moved; a roll-up the
        reference before already printed (the baseline and the previous run often differ
        alike) is said once."""
        out: list[str] = []
        printed: dict[frozenset, str] = {}  # the moves a roll-up was printed for -> against what
        for against, report in self.reports:
            head = f"compare against {against}: {report.direction} ({report.summary()})"
            out.append(f"**{prose(head)}**" if fmt == "markdown" else head)
            moves = frozenset((f.key, f.metric, f.verdict) for f in report.findings if f.verdict in ORDER)
            if moves and moves in printed:
                out.append(f"  the same moves as against {printed[moves]}" if fmt == "text"
                           else f"- the same moves as against {prose(printed[moves])}")
                continue
            printed[moves] = against
            out += rollup_lines(report.findings, report.configs, fmt)[1:9]
        return out

    def headline(self) -> str:
        """The first roll-up line of the first reference that moved ("" when none did)."""
        for _, report in self.reports:
            lines = rollup_lines(report.findings, report.configs)[1:]
            if lines:
                return lines[0].strip()[:500]
        return ""

    def note(self) -> str:
        """The verdict for the MLflow parent's description, the page a red run opens on:
        what moved, by how much and in which configs, against each reference."""
        if not self.reports:
            return ""
        return "\n".join([f"**Verdict: {self.direction}.**", "", *self._rolled("markdown")])

    def markdown(self, run_id: str) -> str:
        """The compare tables as plain text in code fences: config ids and values hold
        characters Markdown would read as markup, and a fence shows them as they are."""
        parts = [f"# kvbench compare: {run_id}", "", f"Verdict: **{self.direction or 'no reference'}**", ""]
        for against, report in self.reports:
            parts += [f"## Against {against}", "", "```text", report.table("text"), "```", ""]
        return "\n".join(parts + self.notes) + "\n"


def earlier_runs(run_dir: RunDir, meta: dict[str, Any], roots: list[Path]) -> list[RunDir]:
    """The runs of the same suite and hardware profile that started before this one, newest first
    (a shard not yet merged is part of a night, not one)."""
    suite, profile = meta.get("suite"), (meta.get("hardware") or {}).get("profile")
    created = meta.get("created") or 0
    found: list[tuple[float, str, RunDir]] = []
    for root in roots:
        if not root.is_dir():
            continue
        for p in root.iterdir():
            if not (p / RESULTS).is_file() or p.resolve() == run_dir.path.resolve():
                continue
            try:
                other = RunDir(p).meta()
            except Exception:  # a foreign or torn directory is not a night
                continue
            when = other.get("created")
            if (other.get("shard") or other.get("suite") != suite or (other.get("hardware") or {}).get("profile") != profile
                    or not isinstance(when, (int, float)) or when >= created):
                continue
            found.append((when, p.name, RunDir(p)))
    return [run for *_, run in sorted(found, key=lambda f: f[:2], reverse=True)]


def judge(run_dir: RunDir, rows: list[dict[str, Any]], meta: dict[str, Any], root: Path,
          nights: Path | None = None) -> Judgement:

    j = Judgement()
    selected = selection(meta)  # a filtered sweep, or a shard, does not miss what it left out
    profile = (meta.get("hardware") or {}).get("profile") or "cpu"
    path = default_path(profile, root)
    if os.path.lexists(path):  # whatever is there (a FIFO, a link, damage) is read, and refused, as a baseline
        try:
            j.baseline = load_baseline(path, expected_profile=profile)
            j.reports.append((f"baseline {path.name}", compare_rows(rows, j.baseline, selected=selected)))
        except BaselineError as err:
            j.notes.append(f"compare: baseline not used: {err}")
            j.unjudged.append(f"the baseline cannot be read ({err})")
    for prev in earlier_runs(run_dir, meta, [nights] if nights else [root / "runs"]):
        try:
            prev_rows = load_rows(prev.path)
            check_figures(prev_rows, f"run {prev.run_id}")
            ref = reference_of_run(prev_rows, prev.meta())
        except HarnessError as err:  # a damaged night: the gate cannot say what moved since
            j.notes.append(f"compare: previous run {prev.run_id} not used: {err}")
            j.unjudged.append(f"the previous run {prev.run_id} cannot be read ({err})")
            break
        if not ref["configs"]:
            continue  # a night that crashed before its first row measured nothing: no comparison point
        j.previous = prev.path
        j.reports.append((f"previous run {prev.run_id}", compare_rows(rows, ref, selected=selected)))
        break
    if not j.reports and not j.unjudged:
        j.unjudged.append(f"no baseline for profile {profile} ({path}) and no earlier run of the suite")
    elif j.reports and not any(r.judged for _, r in j.reports) and not j.unjudged:
        j.unjudged.append("no config of the run is in its references (every one is new)")
    return j


def write_files(run_dir: RunDir, j: Judgement) -> list[Path]:
    """compare.md and report.html in the run directory (nothing when there is no reference)."""
    if not j.reports:
        return []

    md = run_dir.path / "compare.md"
    replace_text(md, j.markdown(run_dir.run_id))
    nights = [history.load_night(p) for p in ([j.previous] if j.previous else [])] + [history.load_night(run_dir.path)]
    hist = history.build(nights)
    html, _ = report_view.page(hist, metrics=list(TREND_METRICS), configs=None, heat_metric="peak_tokens_held",
                          baseline=j.baseline)
    page = run_dir.path / "report.html"
    replace_text(page, html)
    return [md, page]


def tag_parent(uri: str, parent: str, j: Judgement, files: list[Path], fail: bool) -> None:
    """The verdict as the parent's tag, the files as its artifacts (``compare/``); a
    regression under --fail-on-regression closes it FAILED, the red the night deserves."""

    cl = client(uri)
    if j.direction:
        cl.set_tag(parent, TAG, j.direction)
        note = cl.get_run(parent).data.tags.get(NOTE, "")
        kept = note.split(NOTE_RULE, 1)[-1]  # a judged-again parent replaces its verdict, keeps the rest
        cl.set_tag(parent, NOTE, j.note() + NOTE_RULE + kept)
        # A tag shows on the run page's first screen; the description is below it.
        cl.set_tag(parent, MOVED, j.headline() or "nothing moved")
    for path in files:
        cl.log_artifact(parent, str(path), artifact_path="compare")
    if fail and (j.regressed or j.unjudged):
        cl.set_terminated(parent, "FAILED")


REGRESSED, UNJUDGED = 1, 2  # the sweep's exit status under --fail-on-regression (docs/harness.md)


def judge_sweep(run_dir: RunDir, rows: list[dict[str, Any]], root: Path, opts, console, warn) -> int:
    """After a sweep: judge it, print the verdict, write and attach the files. Returns the
    gate's exit status under --fail-on-regression (else 0): REGRESSED when a reference says
    so, else UNJUDGED when the gate cannot judge (a reference that exists is unreadable or
    damaged, or there is none), each said in one line. The results on disk stand either way."""

    meta = run_dir.meta()
    try:
        j = judge(run_dir, rows, meta, root, Path(opts.nights) if opts.nights else None)
    except Exception as err:
        warn(f"kvbench: warning: the sweep could not judge itself: {one_line(err)}")
        j = Judgement(unjudged=[f"the judgement broke ({one_line(err)})"])
    try:
        files = write_files(run_dir, j)
    except Exception as err:  # the verdict stands; only its files are missing
        warn(f"kvbench: warning: compare.md and report.html were not written: {one_line(err)}")
        files = []
    for line in j.lines():
        console.print(line, markup=False, highlight=False)
    if files:
        console.print(f"compare table and report: {', '.join(str(f) for f in files)}", markup=False)
    if meta.get("mlflow_uri") and meta.get("mlflow_parent"):
        try:
            tag_parent(meta["mlflow_uri"], meta["mlflow_parent"], j, files, opts.fail_on_regression)
        except Exception as err:  # MLflow is a view
            warn(f"kvbench: warning: MLflow: the verdict was not attached: {one_line(err)}")
    if not opts.fail_on_regression:
        return 0
    if j.regressed:
        # soft_wrap: the gate's verdict stays one line a CI log can be searched for, at any width
        console.print(f"--fail-on-regression: the run regressed: exit {REGRESSED}", markup=False, soft_wrap=True)
        return REGRESSED
    if j.unjudged:
        console.print(f"--fail-on-regression: the gate cannot judge this run: {'; '.join(j.unjudged)}: "
                      f"exit {UNJUDGED}", markup=False, highlight=False, soft_wrap=True)
        return UNJUDGED
    return 0
