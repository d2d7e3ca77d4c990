"""The report's view per config, as asv has a graph per benchmark: every config of the
runs, each with every night's trend of each figure and the steps found in it.

The shared trend charts draw a few configs each and lines that coincide hide one
another; here no config is left out. One file, no script: the index is a list of
links, and CSS ``:target`` shows the one config a link names (the others stay folded),
so the page works offline from a CI artifact and a config's view has its own address
(report.html#cfg-12) to paste into an issue.

A step is where a figure's fitted level changed between two nights (harness/judge/steps.py):
the view names the night it landed on, the commit range, the levels and the size, and
marks it on the chart.

A timing measured once a run (the suite's repeat is 1) has no spread: its jumps
between runs are noise (the same config moved 22k -> 33k tokens/s 30 s apart), and
compare never judges it. Such a figure is drawn and captioned "one sample a run",
never fitted for steps nor coloured as one.
"""

from __future__ import annotations

from html import escape

from harness.core.metrics import lookup
from harness.judge import history, steps
from harness.view.report_svg import fmt, line_chart

CSS = """
.cfg{display:none;border:1px solid #ddd;border-radius:4px;padding:4px 12px 12px;margin:10px 0}
.cfg:target{display:block} .cfg h3 a{font-weight:normal;font-size:12px;margin-left:10px}
table.configs td.steps{color:#b3261e} .step text{font-size:11px}
"""


def single_sample(hist: history.History, key: str, metric: str) -> bool:
    """A noisy figure (a timing, gated by noise) with no run that repeated it."""
    return lookup(metric).gate == "noise" and not any(len(s) > 1 for s in hist.samples(key, metric))


def found_steps(hist: history.History, key: str, metrics: list[str]) -> list[tuple[str, steps.Step]]:
    out = []
    for metric in metrics:
        if single_sample(hist, key, metric):
            continue
        out += [(metric, s) for s in steps.detect(hist.values(key, metric), hist.samples(key, metric))]
    return out


def metrics_of(hist: history.History, key: str, metrics: list[str]) -> list[str]:
    """The report's figures, then any other that moved for this config, each if measured."""
    moved = [m.metric for m in hist.moves if m.key == key]
    wanted = list(dict.fromkeys([*metrics, *moved]))
    return [m for m in wanted if any(v is not None for v in hist.values(key, m))]


def _step_row(hist: history.History, metric: str, s: steps.Step) -> str:
    night, prev = hist.nights[s.night], hist.nights[s.prev]
    return (f'<tr><td class="mono">{escape(metric)}</td><td class="mono">{escape(night.name)}</td>'
            f'<td class="mono">{escape(prev.short)}..{escape(night.short)}</td><td>{fmt(s.before)}</td>'
            f'<td>{fmt(s.after)}</td><td>{escape(s.size())}</td></tr>')


def config_view(hist: history.History, key: str, i: int, metrics: list[str],
                found: list[tuple[str, steps.Step]]) -> str:
    labels = [n.short for n in hist.nights]
    name = hist.names.get(key, key)
    if found:
        table = ('<table class="steps"><thead><tr><th>metric</th><th>landed in run</th><th>commit range</th>'
                 '<th>before</th><th>after</th><th>size</th></tr></thead><tbody>'
                 + "".join(_step_row(hist, m, s) for m, s in found) + "</tbody></table>")
    else:
        table = '<p class="note">no step: every figure kept its level over the runs.</p>'
    charts = []
    for j, metric in enumerate(metrics):
        spreads = [(min(s), max(s)) if len(s) > 1 else None for s in hist.samples(key, metric)]
        series = [{"label": name, "values": hist.values(key, metric), "spread": spreads}]
        marks = [(s.prev, s.night, s.size()) for m, s in found if m == metric]
        once = " (one sample a run: no spread, not judged)" if single_sample(hist, key, metric) else ""
        charts.append(f'<figure><figcaption>{escape(metric)}{once}</figcaption>'
                      + line_chart(f"{name} {metric}", labels, series, metric, f"cfg-{i}-{j}", size=(520, 200),
                                   legend=False, cls="config", marks=marks) + "</figure>")
    return (f'<section class="cfg" id="cfg-{i}"><h3><span class="mono">{escape(name)}</span>'
            f'<a href="#configs">all configs</a></h3>{table}<div class="heatmaps">{"".join(charts)}</div></section>')


def configs_section(hist: history.History, metrics: list[str]) -> tuple[str, int]:
    """(the index and a view per config, how many steps were found)."""
    keys = sorted(hist.keys(), key=lambda k: hist.names.get(k, k))
    per = {k: metrics_of(hist, k, metrics) for k in keys}
    found = {k: found_steps(hist, k, per[k]) for k in keys}
    order = sorted(range(len(keys)), key=lambda i: (not found[keys[i]], hist.names.get(keys[i], keys[i])))
    rows = []
    for i in order:
        key = keys[i]
        said = "; ".join(f"{m} {s.size()} in {hist.nights[s.night].name}" for m, s in found[key]) or "-"
        measured = sum(n.row(key) is not None for n in hist.nights)
        rows.append(f'<tr><td class="mono"><a href="#cfg-{i}">{escape(hist.names.get(key, key))}</a></td>'
                    f'<td>{measured}</td><td class="{"steps" if found[key] else ""}">{escape(said)}</td></tr>')
    total = sum(len(f) for f in found.values())
    index = (f'<p class="note">{len(keys)} configs, {total} steps (where a figure\'s level changed between runs, '
             'fitted as asv does). Pick a config to see every run of each figure, its steps marked.</p>'
             '<table class="configs"><thead><tr><th>config</th><th>runs</th><th>steps</th></tr></thead><tbody>'
             + "".join(rows) + "</tbody></table>")
    views = "".join(config_view(hist, keys[i], i, per[keys[i]], found[keys[i]]) for i in range(len(keys)))
    return index + views, total
