"""The report's heatmaps: a memory figure over page_size x block_size, like for like.

A cell must compare configs that differ only in the heatmap's two axes. Folding the
other options into a cell (its maximum over every config at that page size) let one
workload that exists only at page size 64 (shared prompts, two turns) stand for the
whole column: DFLASH ps 64 read 4928 token slots where every config that differs
from the ps 16 one only in page size holds 2240. So the run is cut into slices,
one per combination of the other options, and each slice gets its own heatmap,
captioned with the values that set it apart from the other slices. A cell is then
exactly one config.
"""

from __future__ import annotations

from typing import Any

from harness.core.metrics import lookup
from harness.judge import history
from harness.view.report_svg import heatmap
from harness.view.templating import render

MAX_SLICES = 8
IGNORED = ("seed",)  # one value per suite; never what tells slices apart


def _value(v: Any) -> str:
    return "none" if v is None else str(v)


def slices(rows: list[dict[str, Any]], metric: str, x: str, y: str) -> list[tuple[dict[str, str], dict[tuple, float]]]:
    """[(the options that name the slice, {(x value, y value): figure})], the slices with
    the most cells first. Every option but ``x`` and ``y`` is held fixed in a slice;
    the name lists only those whose value differs between slices."""
    found: dict[tuple, dict[tuple, float]] = {}
    others: dict[tuple, dict[str, str]] = {}
    for row in rows:
        cfg, value = row.get("config") or {}, history.figures(row).get(metric)
        if cfg.get(x) is None or cfg.get(y) is None or value is None:
            continue
        rest = {k: _value(v) for k, v in sorted(cfg.items()) if k not in (x, y, *IGNORED)}
        key = tuple(rest.items())
        others[key] = rest
        found.setdefault(key, {})[(cfg[x], cfg[y])] = value  # a resumed run's later row wins
    names = sorted({k for rest in others.values() for k in rest})
    varying = [k for k in names if len({rest.get(k, "none") for rest in others.values()}) > 1]
    out = [({k: others[key].get(k, "none") for k in varying}, cells) for key, cells in found.items()]
    return sorted(out, key=lambda s: (-len(s[1]), [s[0][k] for k in varying]))


def caption(named: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in named.items()) or "every config"


def heatmap_section(night: history.Night, metric: str, x: str = "page_size", y: str = "block_size") -> str:
    """One heatmap per slice of the run (every other option fixed), each cell one config."""
    found = slices(night.rows, metric, x, y)
    drawn = []
    for i, (named, cells) in enumerate(found[:MAX_SLICES]):
        xs = sorted({k[0] for k in cells})
        ys = sorted({k[1] for k in cells})
        title = caption(named)
        drawn.append({"caption": title, "svg": heatmap(f"{metric}: {title}", xs, ys,
                                                       {k: (v, "") for k, v in cells.items()}, x, y, f"heatmap-{i}")})
    return render("heatmaps", slices=drawn, undrawn=[caption(named) for named, _ in found[MAX_SLICES:]],
                  night=night.name, metric=metric, unit=lookup(metric).unit, x=x, y=y)
