"""Nightly triage: regressions seen on consecutive nights become tracking issues.

One noisy night opens nothing. A (config key, metric) that ``kvbench compare``
calls a regression on the newest night and the ``min_nights - 1`` nights before it
opens, or updates, the one issue whose title names that config and metric. The
comparison itself is harness.compare's, against the profile's baseline.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from harness.ci.github_client import Client
from harness.compare import compare_rows
from harness.ci.links import mlflow_link
from harness.results import load_rows
from mini_engine.errors import ConfigError

LABEL = "kvbench-regression"
MAX_KEY_IN_TITLE = 160
MARKER = "<!-- kvbench-triage -->"


@dataclass
class Night:
    name: str
    path: Path
    report: object  # harness.compare.CompareReport
    rows: list[dict]
    mlflow: str = ""  # link to the night's MLflow parent run, when known

    def regression(self, key: str, metric: str):
        return next((f for f in self.report.regressions if f.key == key and f.metric == metric), None)

    def finding(self, key: str, metric: str):
        """The night's figure for a config and metric, or None if it was not measured."""
        return next((f for f in self.report.findings if f.key == key and f.metric == metric), None)


@dataclass
class Tracking:
    key: str
    metric: str
    streak: int
    title: str
    body: str


@dataclass
class TriagePlan:
    track: list[Tracking] = field(default_factory=list)
    blips: list[tuple[str, str]] = field(default_factory=list)  # regressed on the newest night only
    recovered: list[tuple[str, str]] = field(default_factory=list)  # regressed before, measured fine now


def title_for(metric: str, key: str, where: str) -> str:
    # GitHub titles stop at 256 characters; a long key keeps a hash so it stays unique.
    if len(key) > MAX_KEY_IN_TITLE:
        key = key[: MAX_KEY_IN_TITLE - 10] + "~" + hashlib.sha256(key.encode()).hexdigest()[:8]
    return f"kvbench regression: {metric} on {key} ({where})"


def load_nights(dirs: list[Path], baseline: dict, ui_url: str = "") -> list[Night]:
    """The nights, oldest first, each compared with the baseline."""
    nights = []
    for d in dirs:
        d = Path(d)
        if not (d / "results.jsonl").is_file():
            raise ConfigError(f"--nights: {d} has no results.jsonl")
        rows = load_rows(d)
        nights.append(Night(d.name, d, compare_rows(rows, baseline), rows, mlflow_link(d, ui_url)))
    return nights


def history(root: Path) -> list[Path]:
    """The night directories under ``root``, oldest first (names sort by time)."""
    if not root.is_dir():
        raise ConfigError(f"--history: {root} is not a directory")
    return sorted(p for p in root.iterdir() if (p / "results.jsonl").is_file())


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return "-" if value is None else str(value)


def _change(value: object) -> str:
    return f"{value:+.1%}" if isinstance(value, float) else _fmt(value)


def _body(key: str, metric: str, where: str, nights: list[Night], streak: int, baseline: dict) -> str:
    newest = nights[-1]
    since = nights[-streak].name
    lines = [
        MARKER,
        f"`{metric}` regressed on config `{key}` ({where}) on {streak} consecutive nights, since `{since}`.",
        "",
        "| night | baseline | now | change | verdict | MLflow |",
        "|---|---|---|---|---|---|",
    ]
    for night in nights:
        f = night.finding(key, metric)
        link = f"[run]({night.mlflow})" if night.mlflow else "-"
        if f is None:
            lines.append(f"| `{night.name}` | - | - | - | absent | {link} |")
        else:
            lines.append(f"| `{night.name}` | {_fmt(f.baseline)} | {_fmt(f.now)} | {_change(f.change)} "
                         f"| {f.verdict} | {link} |")
    rows = [r for r in newest.rows if r.get("key") == key]
    # This config alone: the rest of the baseline would only show up as "missing".
    own = {**baseline, "configs": {k: v for k, v in (baseline.get("configs") or {}).items() if k == key}}
    lines += ["", f"`kvbench compare` on `{newest.name}` for this config:", "",
              compare_rows(rows, own).table(fmt="markdown").rstrip(), ""]
    lines.append("_Opened and updated by `kvbench ci triage`; it reopens this issue if the regression comes back._")
    return "\n".join(lines) + "\n"


def plan(nights: list[Night], baseline: dict, where: str, min_nights: int = 2) -> TriagePlan:
    if min_nights < 2:
        raise ConfigError(f"--min-nights must be an integer >= 2 (got {min_nights})")
    if not nights:
        raise ConfigError("--nights: give at least one night directory")
    out = TriagePlan()
    newest = nights[-1]
    for f in newest.report.regressions:
        streak = 0
        for night in reversed(nights):
            if night.regression(f.key, f.metric) is None:
                break
            streak += 1
        if streak >= min_nights:
            out.track.append(Tracking(f.key, f.metric, streak, title_for(f.metric, f.key, where),
                                      _body(f.key, f.metric, where, nights, streak, baseline)))
        else:
            out.blips.append((f.key, f.metric))
    if len(nights) >= 2:
        for f in nights[-2].report.regressions:
            # A figure the newest night did not measure (a sweep that stopped early) has not recovered.
            now = newest.finding(f.key, f.metric)
            if now is not None and now.verdict not in ("regression", "missing"):
                out.recovered.append((f.key, f.metric))
    return out


def apply(tp: TriagePlan, client: Client, where: str, newest: str) -> list[str]:
    """Open or update the issues; returns one line per action for the log."""
    log = []
    for t in tp.track:
        found = client.find_issue(t.title, LABEL)
        if found is None:
            number = client.open_issue(t.title, t.body, [LABEL])
            log.append(f"opened #{number}: {t.title}")
        else:
            reopen = found.get("state") != "open"
            client.update_issue(found["number"], t.body, reopen=reopen)
            log.append(f"{'reopened' if reopen else 'updated'} #{found['number']}: {t.title}")
    for key, metric in tp.recovered:
        title = title_for(metric, key, where)
        found = client.find_issue(title, LABEL)
        if found is not None and found.get("state") == "open" and "recovered on" not in found["body"][-200:]:
            client.update_issue(found["number"], found["body"] + f"\n**Not regressed on `{newest}`** (recovered on that night).\n")
            log.append(f"noted recovery on #{found['number']}: {title}")
    for key, metric in tp.blips:
        log.append(f"one night only, no issue yet: {metric} on {key}")
    return log
