"""`kvbench report RUN...`: one self-contained HTML page and a Markdown summary.

The page holds, for the given runs of one suite (oldest first by start time):
the runs with their commits and MLflow links, trend lines per config of the
figures that matter (error bars where a timing has repeated samples; configs with
equal figures share a line), a view per config with its steps (report_configs.py), the figures
that moved between consecutive runs (history.py), the compare table of the newest
run against the one before it (or a baseline), and heatmaps of a memory figure
over page_size x block_size, one per slice of the other options (report_heatmap.py).
Styles and charts are inline (SVG), no script and no network, so the file opens
the same from a CI artifact. The Markdown summary is
the same story in a few lines for $GITHUB_STEP_SUMMARY.

This file picks and orders what each section shows; the markup is in one template per
section under templates/report/ (templating.py, autoescaped).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

from harness.core.markdown import code, prose
from harness.core.metric_kinds import higher_is_better, kind
from harness.core.safe_write import write_text
from harness.core.urls import check_web_url, is_web_url
from harness.judge import history
from harness.judge.compare import CompareReport, compare_rows, reference_of_run
from harness.judge.rollup import ORDER, rollup_lines
from harness.store.links import mlflow_link
from harness.view.capacity_report import capacity_section
from harness.view.report_configs import configs_section, single_sample
from harness.view.report_heatmap import heatmap_section
from harness.view.report_svg import line_chart
from harness.view.templating import render

MAX_LINES = 8  # configs per trend chart; more are unreadable
MAX_TABLE = 200


def ui_base(night: history.Night, mlflow_url: str = "") -> str:
    """The MLflow UI to link to: given, $MLFLOW_UI_URL, or the run's server when it is one."""
    uri = str(night.meta.get("mlflow_uri") or "")
    # Each becomes an href and a Markdown link target: http(s) only (a javascript: URL would run).
    given = check_web_url(mlflow_url, "--mlflow-url") or check_web_url(os.environ.get("MLFLOW_UI_URL", ""), "MLFLOW_UI_URL")
    return given or (uri if is_web_url(uri) else "")


def accounting_only(row: dict[str, Any]) -> bool:
    return (row.get("config") or {}).get("model", "none") == "none"


def is_rate(metric: str) -> bool:
    return kind(metric) == "timing" and higher_is_better(metric)


def metric_label(metric: str, bookkeeping: bool) -> str:
    """A rate of the accounting-only backend is how fast the bookkeeping runs, not serving."""
    better = "higher" if higher_is_better(metric) else "lower"
    text = f"{metric} ({kind(metric)}, {better} is better)"
    if bookkeeping and is_rate(metric):
        text += ("; for configs marked [bookkeeping] (--model none) it is the speed of the host planner (the "
                 "bookkeeping alone, no forward pass), not a serving figure")
    return text


def pick_configs(hist: history.History, metric: str, wanted: list[str] | None) -> list[str]:
    """The configs drawn for a metric: those whose figure moved first, then the most varied."""
    moved = {m.key for m in hist.moves if m.metric == metric}
    keys = [k for k in hist.keys() if any(v is not None for v in hist.values(k, metric))]
    if wanted:
        keys = [k for k in keys if any(w in k or w in hist.names.get(k, "") for w in wanted)]

    def spread(k: str) -> float:
        vals = [v for v in hist.values(k, metric) if v is not None]
        return (max(vals) - min(vals)) / (abs(max(vals)) or 1)

    return sorted(keys, key=lambda k: (k not in moved, -spread(k), hist.names.get(k, k)))


def trend_section(hist: history.History, metrics: list[str], wanted: list[str] | None) -> str:
    labels = [n.short for n in hist.nights]
    model_none = {r["key"] for n in hist.nights for r in n.rows if accounting_only(r)}
    charts = []
    for j, metric in enumerate(metrics):
        ranked = pick_configs(hist, metric, wanted)
        if not ranked:
            continue
        # Configs with the same figure every night would draw one line over another and
        # hide all but the last: they share one line, named once with their count.
        same: dict[tuple, list[str]] = {}
        for k in ranked:
            same.setdefault(tuple(hist.values(k, metric)), []).append(k)
        series = []
        for members in list(same.values())[:MAX_LINES]:
            k = members[0]
            spreads = [(min(s), max(s)) if len(s) > 1 else None for s in hist.samples(k, metric)]
            mark = " [bookkeeping]" if is_rate(metric) and k in model_none else ""
            also = f" and {len(members) - 1} more with the same values" if len(members) > 1 else ""
            series.append({"label": hist.names.get(k, k) + also + mark, "values": hist.values(k, metric),
                           "spread": spreads, "members": [hist.names.get(m, m) for m in members]})
        drawn = sum(len(m) for m in list(same.values())[:MAX_LINES])
        once = all(single_sample(hist, k, metric) for k in ranked)
        head = metric_label(metric, bool(model_none)) + ("; one sample a run: no spread, never judged" if once else "")
        charts.append({"head": head, "svg": line_chart(metric, labels, series, metric, f"trend-{j}"),
                       "not_drawn": len(ranked) - drawn})
    return render("trends", charts=charts)


def moved_section(hist: history.History, limit: int = 12) -> str:
    """The roll-up, the table of moves, then each figure that moved on its own scale: a
    one-page change on a few hundred pages is flat in a chart shared with other configs."""
    labels = [n.short for n in hist.nights]
    seen: list[tuple[str, str]] = []
    for m in hist.moves:
        if (m.key, m.metric) not in seen:
            seen.append((m.key, m.metric))
    charts = []
    for i, (key, metric) in enumerate(seen[:limit]):
        spreads = [(min(s), max(s)) if len(s) > 1 else None for s in hist.samples(key, metric)]
        name = hist.names.get(key, key)
        series = [{"label": name, "values": hist.values(key, metric), "spread": spreads}]
        charts.append({"name": name, "metric": metric,
                       "svg": line_chart(f"{name} {metric}", labels, series, metric, f"moved-{i}", size=(460, 200),
                                         legend=False, cls="moved")})
    return render("moved", rollup_html=rollup_html(hist.moves, hist.configs()),
                  moves=[(hist.names.get(m.key, m.key), m) for m in hist.moves[:MAX_TABLE]],
                  unlisted=max(0, len(hist.moves) - MAX_TABLE), charts=charts, undrawn=max(0, len(seen) - limit))


def newest_compare(hist: history.History, baseline: dict | None) -> tuple[CompareReport | None, str]:
    """The newest run against the one before it, or against ``baseline`` when given."""
    newest = hist.nights[-1]
    if baseline is not None:
        note = (f"not comparable (hardware profile {baseline.get('profile')} vs {newest.profile})"
                if newest.profile and baseline.get("profile") != newest.profile else None)
        return compare_rows(newest.rows, baseline, timings_note=note), f"baseline ({baseline.get('profile')})"
    if len(hist.nights) < 2:
        return None, ""
    prev = hist.nights[-2]
    note = (f"not comparable (hardware profile {prev.profile} vs {newest.profile})"
            if prev.profile != newest.profile else None)
    report = compare_rows(newest.rows, reference_of_run(prev.rows, prev.meta), timings_note=note)
    return report, f"{prev.name} ({prev.short})"


def compare_table(report: CompareReport | None, against: str, newest: history.Night,
                  shown_above: set[tuple[str, str]] = frozenset()) -> str:
    """The newest run's compare; figures the moved table already lists (the same pair of
    runs) are left out, so each moved figure is in one table only."""
    if report is None:
        return render("compare", report=None)
    shown = [f for f in report.findings if f.verdict != "ok" and (f.key, f.metric) not in shown_above][:MAX_TABLE]
    return render("compare", report=report, against=against, newest=newest.name, now=f"{newest.name} ({newest.short})",
                  rollup_html=rollup_html(report.findings, report.configs), shown_above=bool(shown_above),
                  rows=[(report.names.get(f.key, f.key), f) for f in shown])


def runs_table(hist: history.History, mlflow_url: str) -> str:
    runs = []
    for n in hist.nights:
        counts = Counter(str(r.get("verdict") or r.get("status")) for r in n.rows)
        when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(n.created)) if n.created != float("inf") else "?"
        runs.append({"name": n.name, "commit": n.commit, "short": n.short, "profile": n.profile or "-", "when": when,
                     "configs": len(n.rows), "verdicts": ", ".join(f"{v} {k}" for k, v in sorted(counts.items())),
                     "link": mlflow_link(n.path, ui_base(n, mlflow_url))})
    return render("runs", runs=runs)


def rollup_html(findings, configs: dict) -> str:
    """The roll-up by metric and axis (harness/judge/rollup.py), each line in its verdict's colour."""
    moved = [f for f in findings if f.verdict in ORDER]
    lines = []
    for line in rollup_lines(moved, configs)[1:]:
        word = line.split()[1] if len(line.split()) > 1 else ""
        lines.append(({"regressed": "regression", "improved": "improvement", "changed": "changed"}.get(word, ""),
                      line.strip()))
    return render("rollup", lines=lines)


def page(hist: history.History, *, metrics: list[str], configs: list[str] | None, heat_metric: str,
         baseline: dict | None = None, mlflow_url: str = "") -> tuple[str, CompareReport | None]:
    newest = hist.nights[-1]
    report, against = newest_compare(hist, baseline)
    # Against the run before, the compare is the moved table's last pair: list those once.
    last = len(hist.nights) - 1
    shown_twice = {(m.key, m.metric) for m in hist.moves if m.night == last} if baseline is None else set()
    html = render("page", suite=newest.suite or "?", runs=len(hist.nights), newest=newest,
                  written=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                  bookkeeping=sum(accounting_only(r) for r in newest.rows), heat_metric=heat_metric,
                  runs_html=runs_table(hist, mlflow_url), trends_html=trend_section(hist, metrics, configs),
                  configs_html=configs_section(hist, metrics)[0], moved_html=moved_section(hist),
                  compare_html=compare_table(report, against, newest, shown_twice),
                  heatmaps_html=heatmap_section(newest, heat_metric), capacity_html=capacity_section(newest.rows))
    return html, report


def summary(hist: history.History, report: CompareReport | None, html_name: str, mlflow_url: str = "") -> str:
    """Markdown for $GITHUB_STEP_SUMMARY: runs, what moved, the newest compare. Every
    name, status, figure and commit from the runs is a code span (harness.core.markdown)."""
    newest = hist.nights[-1]
    lines = [f"### kvbench report: {code(newest.suite or '?')}, {len(hist.nights)} runs", "",
             "| run | commit | configs | MLflow |", "|---|---|---|---|"]
    for n in hist.nights:
        link = mlflow_link(n.path, ui_base(n, mlflow_url))
        lines.append(f"| {code(n.name)} | {code(n.short)} | {len(n.rows)} | {f'[run]({link})' if link else '-'} |")
    regressions = [m for m in hist.moves if m.verdict == "regression"]
    better = sum(m.verdict == "improvement" for m in hist.moves)
    changed = sum(m.verdict == "changed" for m in hist.moves)
    lines += ["", f"**Moved between consecutive runs:** {len(hist.moves)} figures, {len(regressions)} regressions, "
              f"{better} improvements, {changed} changed."]

    lines += ["", *rollup_lines(hist.moves, hist.configs(), "markdown")[1:12]]
    for m in regressions[:10]:
        lines.append(f"- {code(hist.names.get(m.key, m.key))} {code(m.metric)}: {code(m.change)} "
                     f"in {code(f'{m.good[:10]}..{m.bad[:10]}')}")
    if report is not None:
        lines += ["", f"**Newest run:** {prose(report.summary())}"]
        if any(f.verdict != "ok" for f in report.findings):
            table = report.table("markdown").splitlines()
            lines += ["", *table[:32]]
            if len(table) > 34:
                lines.append(f"... {len(table) - 34} more rows in the HTML report")
    lines += ["", f"Full report: {code(html_name)} (trend charts, heatmaps; attached to this run)."]
    return "\n".join(lines) + "\n"


def write(path: Path, text: str) -> None:
    write_text(path, text, "--out", mkdir=True)
