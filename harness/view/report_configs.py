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

Markup: templates/report/configs.html (the index) and config.html (one view).
"""

from __future__ import annotations

from typing import Any

from harness.core.metrics import lookup
from harness.judge import history, steps
from harness.view.report_svg import line_chart
from harness.view.templating import render


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


def config_view(hist: history.History, key: str, i: int, metrics: list[str],
                found: list[tuple[str, steps.Step]]) -> dict[str, Any]:
    """What templates/report/config.html draws for one config: its steps and a chart a figure."""
    labels = [n.short for n in hist.nights]
    name = hist.names.get(key, key)
    rows = [{"metric": m, "run": hist.nights[s.night].name, "before": s.before, "after": s.after, "size": s.size(),
             "commits": f"{hist.nights[s.prev].short}..{hist.nights[s.night].short}"} for m, s in found]
    charts = []
    for j, metric in enumerate(metrics):
        spreads = [(min(s), max(s)) if len(s) > 1 else None for s in hist.samples(key, metric)]
        series = [{"label": name, "values": hist.values(key, metric), "spread": spreads}]
        marks = [(s.prev, s.night, s.size()) for m, s in found if m == metric]
        once = " (one sample a run: no spread, not judged)" if single_sample(hist, key, metric) else ""
        charts.append({"caption": metric + once,
                       "svg": line_chart(f"{name} {metric}", labels, series, metric, f"cfg-{i}-{j}", size=(520, 200),
                                         legend=False, cls="config", marks=marks)})
    return {"i": i, "name": name, "steps": rows, "charts": charts}


def configs_section(hist: history.History, metrics: list[str]) -> tuple[str, int]:
    """(the index and a view per config, how many steps were found)."""
    keys = sorted(hist.keys(), key=lambda k: hist.names.get(k, k))
    per = {k: metrics_of(hist, k, metrics) for k in keys}
    found = {k: found_steps(hist, k, per[k]) for k in keys}
    order = sorted(range(len(keys)), key=lambda i: (not found[keys[i]], hist.names.get(keys[i], keys[i])))
    index = [{"i": i, "name": hist.names.get(keys[i], keys[i]),
              "measured": sum(n.row(keys[i]) is not None for n in hist.nights),
              "steps": [f"{m} {s.size()} in {hist.nights[s.night].name}" for m, s in found[keys[i]]]} for i in order]
    total = sum(len(f) for f in found.values())
    views = [config_view(hist, k, i, per[k], found[k]) for i, k in enumerate(keys)]
    return render("configs", index=index, views=views, total=total), total
