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
"""

from __future__ import annotations

import os
import time
from html import escape
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
from harness.view.report_configs import CSS as CONFIG_CSS, configs_section, single_sample
from harness.view.report_heatmap import heatmap_section
from harness.view.report_svg import line_chart

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
    parts = []
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
        more = (f'<p class="note">{len(ranked) - drawn} more configs not drawn here (moved and most varied first); '
                f'every config has its own view under <a href="#configs">Per config</a>.</p>'
                if len(ranked) > drawn else "")
        once = all(single_sample(hist, k, metric) for k in ranked)
        head = metric_label(metric, bool(model_none)) + ("; one sample a run: no spread, never judged" if once else "")
        parts.append(f'<section class="chart"><h3>{escape(head)}</h3>'
                     + line_chart(metric, labels, series, metric, f"trend-{j}") + more + "</section>")
    return "\n".join(parts) or '<p class="empty">no figures to draw</p>'


def moved_section(hist: history.History, limit: int = 12) -> str:
    """Each figure that moved, on its own scale: a one-page change on a few hundred pages
    is flat in a chart shared with other configs."""
    labels = [n.short for n in hist.nights]
    parts = []
    seen: list[tuple[str, str]] = []
    for m in hist.moves:
        if (m.key, m.metric) not in seen:
            seen.append((m.key, m.metric))
    for i, (key, metric) in enumerate(seen[:limit]):
        spreads = [(min(s), max(s)) if len(s) > 1 else None for s in hist.samples(key, metric)]
        name = hist.names.get(key, key)
        series = [{"label": name, "values": hist.values(key, metric), "spread": spreads}]
        parts.append(f'<figure><figcaption><span class="mono">{escape(name)}</span> {escape(metric)}</figcaption>'
                     + line_chart(f"{name} {metric}", labels, series, metric, f"moved-{i}", size=(460, 200),
                                  legend=False, cls="moved") + "</figure>")
    if len(seen) > limit:
        parts.append(f'<p class="note">{len(seen) - limit} more moved figures: see the table.</p>')
    return '<div class="heatmaps">' + "\n".join(parts) + "</div>"


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
        return '<p class="empty">one run and no --baseline: nothing to compare with</p>'
    shown = [f for f in report.findings if f.verdict != "ok" and (f.key, f.metric) not in shown_above][:MAX_TABLE]
    head = "".join(f"<th>{h}</th>" for h in ("config", "metric", escape(against),
                                              escape(f"{newest.name} ({newest.short})"), "change", "verdict"))
    body = "".join(
        f'<tr class="{escape(f.verdict.replace(" ", "-"))}"><td class="mono">{escape(report.names.get(f.key, f.key))}'
        f'</td><td class="mono">{escape(f.metric)}</td><td>{_num(f.baseline)}</td><td>{_num(f.now)}</td>'
        f"<td>{escape(f.change)}</td><td>{escape(f.verdict)}</td></tr>" for f in shown)
    if not shown:
        body = ('<tr><td colspan="6">no other changes: the moved figures are in the table above</td></tr>'
                if shown_above else '<tr><td colspan="6">no changes</td></tr>')
    return (f'<p>{escape(newest.name)} against {escape(against)}: {escape(report.summary())}</p>'
            + rollup_html(report.findings, report.configs) + f'<table class="compare"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>')


def _num(v: Any) -> str:
    if v is None:
        return "-"
    return escape(f"{v:.6g}" if isinstance(v, float) else str(v))


def runs_table(hist: history.History, mlflow_url: str) -> str:
    rows = []
    for n in hist.nights:
        counts: dict[str, int] = {}
        for r in n.rows:
            counts[str(r.get("verdict") or r.get("status"))] = counts.get(str(r.get("verdict") or r.get("status")), 0) + 1
        link = mlflow_link(n.path, ui_base(n, mlflow_url))
        when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(n.created)) if n.created != float("inf") else "?"
        rows.append(f'<tr><td class="mono">{escape(n.name)}</td><td class="mono" title="{escape(n.commit)}">'
                    f'{escape(n.short)}</td><td>{when}</td><td>{escape(n.profile or "-")}</td><td>{len(n.rows)}</td>'
                    f'<td>{escape(", ".join(f"{v} {k}" for k, v in sorted(counts.items())))}</td>'
                    f'<td>{f"<a href={chr(34)}{escape(link)}{chr(34)}>MLflow run</a>" if link else "-"}</td></tr>')
    return ('<table class="runs"><thead><tr><th>run</th><th>commit</th><th>started (UTC)</th><th>hardware</th>'
            '<th>configs</th><th>verdicts</th><th>MLflow</th></tr></thead><tbody>' + "".join(rows) + "</tbody></table>")


def rollup_html(findings, configs: dict) -> str:
    """The roll-up by metric and axis (harness/judge/rollup.py), each line in its verdict's colour."""

    moved = [f for f in findings if f.verdict in ORDER]
    items = []
    for line in rollup_lines(moved, configs)[1:]:
        word = line.split()[1] if len(line.split()) > 1 else ""
        cls = {"regressed": "regression", "improved": "improvement", "changed": "changed"}.get(word, "")
        items.append(f'<li class="{cls}">{escape(line.strip())}</li>')
    return f'<ul class="rollup">{"".join(items)}</ul>' if items else ""


def moves_table(hist: history.History) -> str:
    if not hist.moves:
        return '<p>No figure moved between consecutive runs.</p>'
    body = "".join(
        f'<tr class="{escape(m.verdict)}"><td class="mono">{escape(hist.names.get(m.key, m.key))}</td>'
        f'<td class="mono">{escape(m.metric)}</td><td>{_num(m.before)}</td><td>{_num(m.after)}</td>'
        f'<td>{escape(m.change)}</td><td>{escape(m.verdict)}</td><td class="mono">{escape(m.good[:10])}..'
        f'{escape(m.bad[:10])}</td></tr>' for m in hist.moves[:MAX_TABLE])
    return ('<table class="moves"><thead><tr><th>config</th><th>metric</th><th>before</th><th>after</th>'
            '<th>change</th><th>verdict</th><th>commit range</th></tr></thead><tbody>' + body + "</tbody></table>"
            + (f'<p class="note">{len(hist.moves) - MAX_TABLE} more moves not listed.</p>'
               if len(hist.moves) > MAX_TABLE else ""))


CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;max-width:1120px;color:#222;padding:0 16px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:14px;margin:16px 0 4px} .mono,code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
table{border-collapse:collapse;margin:6px 0} th,td{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f4} tr.regression td{background:#fde8e4} tr.improvement td{background:#e6f4ea}
tr.changed td{background:#eef0fb} .rollup li.regression{color:#b3261e} .rollup li.improvement{color:#1e7b34}
.rollup li.changed{color:#3949ab} .rollup{margin:6px 0;padding-left:20px}
tr.missing td,tr.new td{background:#fff6d8} tr.not-comparable td{color:#777}
svg text{font-size:11px;fill:#333} svg .mono{font-family:ui-monospace,Menlo,monospace}
.plot{fill:#fff;stroke:#bbb} .grid{stroke:#eee} .line{fill:none;stroke-width:2} .err{stroke-width:1.5;opacity:.6}
.nocell{fill:#f4f4f4} .legend{list-style:none;padding:0;margin:2px 0 10px;columns:2;font-size:12px}
.legend li{font-family:ui-monospace,Menlo,monospace;overflow-wrap:anywhere}
.swatch{display:inline-block;width:10px;height:10px;margin-right:6px;border-radius:2px}
.heatmaps{display:flex;flex-wrap:wrap;gap:18px} figure{margin:0} figcaption{font-size:12px;color:#555}
.note,.empty{color:#666;font-size:12px}
"""


def page(hist: history.History, *, metrics: list[str], configs: list[str] | None, heat_metric: str,
         baseline: dict | None = None, mlflow_url: str = "") -> tuple[str, CompareReport | None]:
    newest = hist.nights[-1]
    suite = newest.suite or "?"
    report, against = newest_compare(hist, baseline)
    # Against the run before, the compare is the moved table's last pair: list those once.
    last = len(hist.nights) - 1
    shown_twice = {(m.key, m.metric) for m in hist.moves if m.night == last} if baseline is None else set()
    none = sum(accounting_only(r) for r in newest.rows)
    note = (f'<p class="note">{none} of {len(newest.rows)} configs use the accounting-only backend '
            '(<code>--model none</code>): for them a rate such as output_tokens_per_s is the speed of the '
            'bookkeeping, not of serving.</p>' if none else "")
    html = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>kvbench report: {escape(suite)}</title><style>{CSS}{CONFIG_CSS}</style></head>
<body>
<h1>kvbench report: {escape(suite)}</h1>
<p>{len(hist.nights)} runs, oldest first; newest <span class="mono">{escape(newest.name)}</span> at commit
<span class="mono">{escape(newest.commit)}</span>. Written {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.</p>
{note}
<h2>Runs</h2>
{runs_table(hist, mlflow_url)}
<h2 id="trends">Trends per config</h2>
<p class="note">x: the runs by commit; a point's tooltip names config and value; bars span the repeated samples.</p>
{trend_section(hist, metrics, configs)}
<h2 id="configs">Per config</h2>
{configs_section(hist, metrics)[0]}
<h2 id="moved">Moved between consecutive runs</h2>
{rollup_html(hist.moves, hist.configs())}
{moves_table(hist)}
{moved_section(hist)}
<h2 id="compare">Compare: newest run</h2>
{compare_table(report, against, newest, shown_twice)}
<h2 id="heatmap">{escape(heat_metric)} over page_size x block_size ({escape(newest.name)})</h2>
{heatmap_section(newest, heat_metric)}
<h2 id="capacity">Capacity per GPU ({escape(newest.name)})</h2>
{capacity_section(newest.rows)}
</body></html>
"""
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
