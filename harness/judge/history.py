"""Nights: the runs of one suite over time, each with the commit it measured.

A night is a run directory (results.jsonl + meta.json, as `kvbench sweep` writes
it); meta.json carries the commit (``git_commit``), the start time (``created``),
the suite and the hardware profile. `kvbench history` reads a directory of such
run directories (the nightly's kept nights, or results/runs/ of a machine),
orders them by start time and shows, per config and metric, the last N nights.

A figure *moved* on a night when `kvbench compare` of that night against the night
before calls it a regression, an improvement or (a figure without a direction)
changed: counters exactly, timings by the significance rule. The move is attributed to the commit range between the two
nights' commits, the range a bisect would search.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import UsageError
from harness.core.markdown import code
from harness.core.metric_kinds import kind
from harness.judge.baseline import counters_of
from harness.judge.compare import compare_rows, reference_of_run
from harness.store.results import RESULTS, RunDir, load_rows

MOVED = ("regression", "improvement", "changed")
FIGURE_RE = re.compile(r"-?[0-9][0-9.e+-]*|-|")  # what _num writes (and no note): shown as is in Markdown


@dataclass
class Night:
    path: Path
    meta: dict[str, Any]
    rows: list[dict[str, Any]]
    _by_key: dict[str, dict[str, Any]] | None = field(default=None, repr=False, compare=False)
    _figures: dict[str, dict[str, float]] = field(default_factory=dict, repr=False, compare=False)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def commit(self) -> str:
        return str(self.meta.get("git_commit") or "unknown")

    @property
    def short(self) -> str:
        return self.commit[:10]

    @property
    def created(self) -> float:
        c = self.meta.get("created")
        return float(c) if isinstance(c, (int, float)) else math.inf

    @property
    def suite(self) -> str:
        return str(self.meta.get("suite") or next((r.get("suite") for r in self.rows if r.get("suite")), ""))

    @property
    def profile(self) -> str:
        return str((self.meta.get("hardware") or {}).get("profile") or "")

    def row(self, key: str) -> dict[str, Any] | None:
        if self._by_key is None:
            self._by_key = {r["key"]: r for r in self.rows}
        return self._by_key.get(key)

    def figures(self, key: str) -> dict[str, float]:
        """figures() of the config's row, computed once (charts ask for them per metric)."""
        if key not in self._figures:
            row = self.row(key)
            self._figures[key] = {} if row is None else figures(row)
        return self._figures[key]


@dataclass
class Move:
    """A figure that moved between two consecutive nights."""
    key: str
    metric: str
    night: int  # index of the night it moved on (the first bad one)
    before: float | None
    after: float | None
    change: str
    verdict: str
    good: str  # commit of the night before
    bad: str  # commit of the night it moved on


@dataclass
class History:
    nights: list[Night]
    moves: list[Move] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)  # key -> test id

    def keys(self) -> list[str]:
        seen: dict[str, None] = {}
        for night in self.nights:
            for row in night.rows:
                seen.setdefault(row["key"], None)
        return list(seen)

    def values(self, key: str, metric: str) -> list[float | None]:
        return [night.figures(key).get(metric) if night.row(key) is not None else None for night in self.nights]

    def configs(self) -> dict[str, dict[str, Any]]:
        """Each config's options (its newest row's), for the roll-up by axis."""
        out: dict[str, dict[str, Any]] = {}
        for night in self.nights:
            for row in night.rows:
                if isinstance(row.get("config"), dict):
                    out[row["key"]] = row["config"]
        return out

    def samples(self, key: str, metric: str) -> list[list[float]]:
        """Per night, the repeated samples of a timing (empty when it ran once)."""
        out = []
        for night in self.nights:
            row = night.row(key) or {}
            out.append([float(x) for x in (row.get("samples") or {}).get(metric) or []])
        return out


def figures(row: dict[str, Any]) -> dict[str, float]:
    """What a night measured for a config: counters (violations included) and timings."""
    out = dict(counters_of(row))
    for name, value in (row.get("metrics") or {}).items():
        if kind(name) in ("timing", "memory") and isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = float(value)
    return out


def is_night(path: Path) -> bool:
    return (path / RESULTS).is_file()


def is_shard(night: Night) -> bool:
    """A shard of a night (kvbench sweep --shard) before kvbench merge joined it: a part
    of a night, not one; its merged run is the night."""
    return isinstance(night.meta.get("shard"), dict)


def load_night(path: Path) -> Night:
    return Night(path, RunDir(path).meta(), load_rows(path))


def find_nights(roots: Path | list[Path], suite: str | None = None) -> list[Night]:
    """The run directories under each root (a directory of runs, or a results root with
    runs/ inside), of ``suite`` when given, oldest first; a run found twice (same name,
    commit and start) counts once; an unmerged shard is no night."""
    found: dict[tuple, Night] = {}  # a copy of a run (in a cache and an artifact) is the same night
    for root in [roots] if isinstance(roots, (str, Path)) else roots:
        root = Path(root)
        if not root.is_dir():
            raise UsageError(f"--nights: {root} is not a directory")
        if not any(is_night(p) for p in root.iterdir() if p.is_dir()) and (root / "runs").is_dir():
            root = root / "runs"
        for p in sorted(root.iterdir()):
            if p.is_dir() and is_night(p):
                night = load_night(p)
                found.setdefault((night.name, night.commit, night.meta.get("created")), night)
    nights = [n for n in found.values() if (suite is None or n.suite == suite) and not is_shard(n)]
    # Start time first (run names need not sort by time); the name breaks ties.
    return sorted(nights, key=lambda n: (n.created, n.name))


def build(nights: list[Night]) -> History:
    """The moves between consecutive measurements of each config. A config is compared
    with the newest earlier night that measured it, not with the night before: an empty
    night (a crash) is no comparison point, and a partial one does not hide the moves
    of the configs it lacks."""
    hist = History(nights)
    for night in nights:
        for row in night.rows:
            if row.get("test_id"):
                hist.names.setdefault(row["key"], row["test_id"])
    last: dict[str, int] = {}  # config key -> index of the newest night so far that measured it
    for i, after in enumerate(nights):
        by_before: dict[int, list[dict[str, Any]]] = {}
        for row in after.rows:
            if row["key"] in last:
                by_before.setdefault(last[row["key"]], []).append(row)
        for j, rows in sorted(by_before.items()):
            _compare(hist, nights[j], after, i, rows)
        last.update((row["key"], i) for row in after.rows)
    return hist


def _compare(hist: History, before: Night, after: Night, i: int, rows: list[dict[str, Any]]) -> None:
    # Timings of two machines say nothing about each other; counters still do.
    note = (f"not comparable (hardware profile {before.profile} vs {after.profile})"
            if before.profile != after.profile else None)
    reference = reference_of_run([before.row(row["key"]) for row in rows], before.meta)
    report = compare_rows(rows, reference, timings_note=note)
    for f in report.findings:
        if f.verdict in MOVED:
            hist.moves.append(Move(f.key, f.metric, i, f.baseline, f.now, f.change, f.verdict,
                                   before.commit, after.commit))


def _num(v: float | None) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and not v.is_integer():
        return f"{v:.4g}"
    return f"{v:g}"


def table(hist: History, *, metrics: list[str] | None = None, configs: list[str] | None = None,
          show_all: bool = False, fmt: str = "text") -> str:
    """Per config, per metric: one column per night (headed by its commit), and where
    the figure moved, the commit range it moved in."""
    moved = {(m.key, m.metric): m for m in hist.moves}
    heads = [n.short for n in hist.nights]
    lines: list[str] = []
    for key in hist.keys():
        name = hist.names.get(key, key)
        if configs and not any(c in name or c in key for c in configs):
            continue
        names = sorted({m for night in hist.nights for m in night.figures(key)} | {"status"})
        if metrics:
            names = [m for m in names if m in metrics]
        elif not show_all:
            names = [m for m in names if (key, m) in moved]
        if not names:
            continue
        cells = []
        for metric in names:
            if metric == "status":
                vals = [str((n.row(key) or {}).get("status") or "-") for n in hist.nights]
            else:
                vals = [_num(v) for v in hist.values(key, metric)]
            m = moved.get((key, metric))
            note = (f"{m.verdict} at {m.bad[:10]} (range {m.good[:10]}..{m.bad[:10]}, {m.change})" if m else "")
            cells.append([metric, *vals, note])
        lines += _block(name, ["metric", *heads, "moved"], cells, fmt)
    if not lines:
        lines = ["no figure moved over these nights" if not (metrics or show_all) else "nothing to show"]
    return "\n".join(lines)


def _block(title: str, head: list[str], cells: list[list[str]], fmt: str) -> list[str]:
    if fmt == "markdown":
        # Names, commits, statuses and notes come from result files: code spans (harness.core.markdown).
        esc = [[c if FIGURE_RE.fullmatch(c) else code(c) for c in row] for row in cells]
        return ["", f"**{code(title)}**", "", "| " + " | ".join(head[:1] + [code(h) for h in head[1:-1]] + head[-1:])
                + " |", "|" + "---|" * len(head), *("| " + " | ".join(row) + " |" for row in esc)]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(head)]
    return ["", title, *("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()
                         for row in [head, *cells])]


def nights_text(hist: History, fmt: str = "text") -> str:
    """The nights, oldest first: index, commit, start time, hardware profile, directory."""

    rows = []
    for i, n in enumerate(hist.nights):
        when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(n.created)) if math.isfinite(n.created) else "?"
        rows.append((str(i + 1), n.short, when, n.profile or "-", n.name))
    if fmt == "markdown":
        return "\n".join(["| # | commit | started (UTC) | hardware | run |", "|---|---|---|---|---|",
                          *(f"| {a} | {code(b)} | {c} | {code(d)} | {code(e)} |" for a, b, c, d, e in rows)])
    return "\n".join(f"  {a:>2}  {b:<10}  {c}  {d:<8}  {e}" for a, b, c, d, e in rows)
