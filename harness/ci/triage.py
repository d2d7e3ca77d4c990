"""Nightly triage: regressions seen on consecutive nights become tracking issues.

One noisy night opens nothing. A config with a metric that ``kvbench compare``
calls a regression on the newest night and the ``min_nights - 1`` nights before it
opens, or updates, the one issue of that config: every metric of the config that
regressed on the newest night is a row of its table. The issue names the commit
range between the last good night and the first bad one (each night's meta.json
carries its commit), links that range and the nights' MLflow runs, and gives the
`kvbench bisect` line that finds the commit. The comparison itself is
harness.judge.compare's, against the profile's baseline.

Keys, metric names, night names and commits come from result files, which a pull
request can shape: in an issue body they appear only as escaped code spans.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from harness.ci.github_client import Client
from harness.ci.issues import note_once, open_or_update, short_key
from harness.ci.text import code, plain
from harness.core.direction import WORDS
from harness.core.errors import UsageError
from harness.judge.compare import compare_rows
from harness.store.artifact import huge_figure
from harness.store.links import mlflow_link
from harness.store.results import RunDir, load_rows

LABEL = "kvbench-regression"
MARKER = "<!-- kvbench-triage -->"
SHA_RE = re.compile(r"[0-9a-f]{7,40}\Z")


@dataclass
class Night:
    name: str
    path: Path
    report: object  # harness.judge.compare.CompareReport
    rows: list[dict]
    mlflow: str = ""  # link to the night's MLflow parent run, when known
    commit: str = ""  # the commit the night measured (meta.json's git_commit)

    def regression(self, key: str, metric: str):
        return next((f for f in self.report.regressions if f.key == key and f.metric == metric), None)

    def finding(self, key: str, metric: str):
        """The night's figure for a config and metric, or None if it was not measured."""
        return next((f for f in self.report.findings if f.key == key and f.metric == metric), None)


@dataclass
class Tracking:
    key: str
    metrics: list[str]  # every metric of the config that regressed on the newest night
    streak: int  # consecutive nights, up to the newest, with a regression of the config
    title: str
    body: str
    good: str = ""  # commit of the last good night, "" when it is older than the nights given
    bad: str = ""  # commit of the first bad night


@dataclass
class TriagePlan:
    track: list[Tracking] = field(default_factory=list)
    blips: list[tuple[str, list[str]]] = field(default_factory=list)  # configs regressed on the newest night only
    recovered: list[str] = field(default_factory=list)  # configs regressed before, measured fine now
    # The newest night's figures that moved the good way or have no direction: compare's
    # words (improved, changed), logged, never filed as a regression.
    moved: list[tuple[str, str, str]] = field(default_factory=list)  # (word, metric, key)


def title_for(key: str, where: str) -> str:
    return plain(f"kvbench regression: {short_key(key)} ({where})", 250)


def repo_url_from_env() -> str:
    """The repository's web address inside GitHub Actions, else ''."""
    server, repo = os.environ.get("GITHUB_SERVER_URL", ""), os.environ.get("GITHUB_REPOSITORY", "")
    if re.fullmatch(r"https://[A-Za-z0-9.-]+", server) and re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", repo):
        return f"{server}/{repo}"
    return ""


def load_nights(dirs: list[Path], baseline: dict, ui_url: str = "") -> list[Night]:
    """The nights, oldest first, each compared with the baseline."""
    nights = []
    for d in dirs:
        d = Path(d)
        if not (d / "results.jsonl").is_file():
            raise UsageError(f"--nights: {d} has no results.jsonl")
        rows = load_rows(d)
        for i, row in enumerate(rows, 1):
            if (name := huge_figure(row)) is not None:
                raise UsageError(f"--nights: {d.name}/results.jsonl row {i}: {name[:60]!r} is an integer beyond "
                                  f"2**63, which no run measures (a damaged night)")
        commit = str(RunDir(d).meta().get("git_commit") or "")
        nights.append(Night(d.name, d, compare_rows(rows, baseline), rows, mlflow_link(d, ui_url), commit))
    return nights


def profile_of(dirs: list[Path]) -> str | None:
    """The hardware profile the nights ran on (meta.json), None when none says; nights of
    two profiles are refused: one baseline cannot judge both."""
    profiles = set()
    for d in dirs:
        hardware = RunDir(Path(d)).meta().get("hardware")
        if isinstance(hardware, dict) and isinstance(hardware.get("profile"), str):
            profiles.add(hardware["profile"])
    if len(profiles) > 1:
        raise UsageError(f"--nights: the nights ran on different hardware profiles ({', '.join(sorted(profiles))}); "
                          "triage one profile at a time")
    return profiles.pop() if profiles else None


def history(root: Path) -> list[Path]:
    """The night directories under ``root``, oldest first (names sort by time)."""
    if not root.is_dir():
        raise UsageError(f"--history: {root} is not a directory")
    # A shard not yet merged (kvbench sweep --shard) is part of a night, not one: kvbench merge makes the night.
    return sorted(p for p in root.iterdir() if (p / "results.jsonl").is_file()
                  and not isinstance(RunDir(p).meta().get("shard"), dict))


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if value is None or isinstance(value, int):
        return "-" if value is None else str(value)
    return code(value, 80)  # a figure that is no number is the result file's text


def _streak(nights: list[Night], key: str, metric: str | None = None) -> int:
    """Consecutive nights up to the newest on which the config (or one metric of it) regressed."""
    n = 0
    for night in reversed(nights):
        hit = (night.regression(key, metric) if metric else
               any(f.key == key for f in night.report.regressions))
        if not hit:
            break
        n += 1
    return n


def _commit_link(repo_url: str, commit: str) -> str:
    return f"[{code(commit[:12])}]({repo_url}/commit/{commit})" if repo_url and SHA_RE.match(commit) else code(commit[:12] or "unknown")


def _range(nights: list[Night], streak: int, repo_url: str) -> tuple[str, str, str]:
    """(good commit, bad commit, the Markdown line naming the range)."""
    first_bad = nights[-streak]
    last_good = nights[-streak - 1] if streak < len(nights) else None
    bad = first_bad.commit
    if last_good is None:
        return "", bad, (f"**Commit range:** the first bad night {code(first_bad.name)} measured "
                         f"{_commit_link(repo_url, bad)}; the last good night is older than the nights triaged.")
    good = last_good.commit
    line = (f"**Commit range:** last good night {code(last_good.name)} at {_commit_link(repo_url, good)}, "
            f"first bad night {code(first_bad.name)} at {_commit_link(repo_url, bad)}")
    if repo_url and SHA_RE.match(good) and SHA_RE.match(bad):
        line += f" ([the commits between]({repo_url}/compare/{good}...{bad}))"
    return good, bad, line + "."


def _body(key: str, metrics: list[str], where: str, nights: list[Night], streak: int, good: str, bad: str,
          range_line: str) -> str:
    newest = nights[-1]
    test_id = newest.report.names.get(key, "")
    lines = [
        MARKER,
        f"Config {code(key)} ({code(where)}) regressed on {streak} consecutive nights, since "
        f"{code(nights[-streak].name)}: {len(metrics)} metric(s) moved.",
        "",
        range_line,
    ]
    if good and bad and test_id:
        lines += ["", "Find the commit (locally, or with the `bisect` workflow on this runner):", "",
                  f"{code(f'kvbench bisect --good {good} --bad {bad} --config {test_id}', 400)}"]
    heads = [code(n.name, 60) for n in nights]
    lines += ["", "| metric | baseline | " + " | ".join(heads) + " | change (newest) | nights in a row |",
              "|---|---|" + "---|" * len(nights) + "---|---|"]
    for metric in metrics:
        base = next((f.baseline for n in nights if (f := n.finding(key, metric)) is not None), None)
        cells = []
        for night in nights:
            f = night.finding(key, metric)
            # Each night's figure says which way it moved, as compare and history do.
            word = WORDS.get(f.verdict) if f is not None else None
            cells.append("absent" if f is None else _fmt(f.now) + (f" **({word})**" if word else ""))
        change = newest.finding(key, metric)
        lines.append(f"| {code(metric, 80)} | {_fmt(base)} | " + " | ".join(cells)
                     + f" | {code(change.change, 80) if change else '-'} | {_streak(nights, key, metric)} |")
    links = [f"[{code(n.name, 60)}]({n.mlflow})" for n in nights if n.mlflow]
    if links:
        lines += ["", "MLflow runs of the nights: " + ", ".join(links)]
    lines += ["", "_Opened and updated by `kvbench ci triage`; it reopens this issue if the regression comes back._"]
    return "\n".join(lines) + "\n"


def plan(nights: list[Night], baseline: dict, where: str, min_nights: int = 2, repo_url: str | None = None) -> TriagePlan:
    if min_nights < 2:
        raise UsageError(f"--min-nights must be an integer >= 2 (got {min_nights})")
    if not nights:
        raise UsageError("--nights: give at least one night directory")
    repo_url = repo_url_from_env() if repo_url is None else repo_url
    out = TriagePlan()
    newest = nights[-1]
    by_key: dict[str, list[str]] = {}
    for f in newest.report.regressions:
        by_key.setdefault(f.key, []).append(f.metric)
    # Fewer leaked pages is no regression: an improved or directionless figure is logged by
    # its word and opens no issue (compare still fails on it until the baseline is blessed).
    out.moved = [(WORDS[f.verdict], f.metric, f.key) for f in newest.report.findings
                 if f.verdict in ("improvement", "changed")]
    for key, metrics in by_key.items():
        # Two nights in a row of the same figure, as before: a config whose metrics take
        # turns regressing for one night each is noise, not a tracked regression.
        streak = max(_streak(nights, key, m) for m in metrics)
        if streak < min_nights:
            out.blips.append((key, metrics))
            continue
        good, bad, range_line = _range(nights, streak, repo_url)
        out.track.append(Tracking(key, metrics, streak, title_for(key, where),
                                  _body(key, metrics, where, nights, streak, good, bad, range_line), good, bad))
    if len(nights) >= 2:
        for key in dict.fromkeys(f.key for f in nights[-2].report.regressions):
            # A config or figure the newest night did not measure (a sweep that stopped early) has not recovered.
            measured = [newest.finding(key, f.metric) for f in nights[-2].report.regressions if f.key == key]
            if key not in by_key and all(m is not None and m.verdict != "missing" for m in measured):
                out.recovered.append(key)
    return out


def apply(tp: TriagePlan, client: Client, where: str, newest: str) -> list[str]:
    """Open or update the issues; returns one line per action for the log."""
    log = [open_or_update(client, t.title, t.body, LABEL) for t in tp.track]
    for key in tp.recovered:
        line = note_once(client, title_for(key, where), LABEL,
                         f"\n**Not regressed on {code(newest)}** (recovered on that night).\n",
                         mark="recovered on", tail=200, what="recovery")
        if line:
            log.append(line)
    for key, metrics in tp.blips:
        log.append(f"one night only, no issue yet: {', '.join(metrics)} on {key}")
    for word, metric, key in tp.moved:
        log.append(f"{word}, no issue: {metric} on {key}")
    return log
