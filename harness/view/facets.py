"""How a figure splits a sweep so that no point folds configs together.

A line figure has an x axis (page_size, block_size, window), lines (what a reader
compares at one x: the algorithm and its draft shape, the policies) and panels:
every other option that varies between the configs gets a panel per value, so
each point is exactly one config. A median across an option that changes the
figure (window halves throughput) would draw a number no config measured.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from harness.core.options import resolved_defaults, short_names
from mini_engine.algos import ALGORITHMS

# Defaults of options a row's config may leave out (older rows, hand-written ones):
# the schema's, as a config that sets nothing resolves them.
DEFAULTS = resolved_defaults()
SHAPE = ("spec", *dict.fromkeys(o.name for a in ALGORITHMS.values() for o in a.options))  # one algorithm's draft
POLICIES = ("profile", "policy", "free_policy")
MAX_PANELS = 12


def opt(row: dict[str, Any], key: str) -> Any:
    return (row.get("config") or {}).get(key, DEFAULTS.get(key))


def measured(rows: list[dict[str, Any]], metric: str) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("status") != "failed"
            and isinstance((r.get("metrics") or {}).get(metric), (int, float))]


def sort_values(values) -> list:
    return sorted(values, key=lambda v: (v is None, v if isinstance(v, (int, float)) else 0, str(v)))


def spread(row: dict[str, Any], metric: str) -> tuple[float, float, float, int]:
    """(median, first quartile, third quartile, samples) of one config's figure: the
    timed repeats where the row kept them, else its one value."""
    samples = [float(s) for s in (row.get("samples") or {}).get(metric) or []]
    if len(samples) < 2:
        v = float(row["metrics"][metric])
        return v, v, v, 1
    q1, med, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return statistics.median(samples), q1, q3, len(samples)


@dataclass
class Panel:
    values: tuple[tuple[str, Any], ...]  # the options that set this panel apart
    lines: dict[tuple, dict[tuple, dict[str, Any]]] = field(default_factory=lambda: defaultdict(dict))

    @property
    def rows(self) -> list[dict[str, Any]]:
        return [r for line in self.lines.values() for r in line.values()]


@dataclass
class Facets:
    x: tuple[str, ...]
    line_keys: tuple[str, ...]  # the line options that vary (the legend names only these)
    panels: list[Panel]
    dropped: int = 0  # panels past MAX_PANELS
    single: int = 0  # panels left out because no line in them has two x values (points, not a line)

    @property
    def common(self) -> tuple[tuple[str, Any], ...]:
        """The panel options every drawn panel shares: said once, not in each panel's title."""
        if len(self.panels) < 2:
            return self.panels[0].values if self.panels else ()
        return tuple(v for v in self.panels[0].values if all(v in p.values for p in self.panels[1:]))

    def xs(self, panel: Panel) -> list[tuple]:
        return _sort_tuples({x for line in panel.lines.values() for x in line})


def _sort_tuples(values) -> list[tuple]:
    return sorted(values, key=lambda t: [(v is None, v if isinstance(v, (int, float)) else 0, str(v)) for v in t])


def _varying(rows: list[dict[str, Any]], keys) -> list[str]:
    return [k for k in keys if len({repr(opt(r, k)) for r in rows}) > 1]


def facet(rows: list[dict[str, Any]], x: tuple[str, ...], lines: tuple[str, ...]) -> Facets:
    """Split rows into panels (every varying option not on x or a line) and lines."""
    keys = sorted({k for r in rows for k in (r.get("config") or {})} | set(DEFAULTS))
    varying = _varying(rows, keys)
    line_keys = tuple(k for k in lines if k in varying)
    panel_keys = [k for k in varying if k not in x and k not in lines]
    panels: dict[tuple, Panel] = {}
    for r in rows:
        pv = tuple((k, opt(r, k)) for k in panel_keys)
        panel = panels.setdefault(tuple(repr(v) for _, v in pv), Panel(pv))
        # A later row of the same config (a resumed run) replaces the earlier one.
        panel.lines[tuple(opt(r, k) for k in line_keys)][tuple(opt(r, k) for k in x)] = r
    ordered = sorted(panels.values(), key=lambda p: [(v is None, str(v)) for _, v in p.values])
    # A panel whose every line is one point (a workload run at one page size) draws no
    # trend: it only shrank the panels that do (20 in the smoke figure, unreadable in MLflow).
    lines_drawn = [p for p in ordered if any(len(line) > 1 for line in p.lines.values())] if len(x_values(rows, x)) > 1 \
        else ordered
    return Facets(x, line_keys, lines_drawn[:MAX_PANELS], max(0, len(lines_drawn) - MAX_PANELS),
                  len(ordered) - len(lines_drawn))


def x_values(rows: list[dict[str, Any]], x: tuple[str, ...]) -> set[tuple]:
    return {tuple(opt(r, k) for k in x) for r in rows}


# Legend spelling: a value alone where it names itself (dflash, aligned), else short=value
# (an algorithm's options and the page size, by their short ids).
_SHORT = {name: short for name, short in short_names().items() if name in SHAPE[1:] or name == "page_size"}


def label(values: tuple, keys: tuple[str, ...]) -> str:
    parts = [f"{_SHORT[k]}{v}" if k in _SHORT else str(v) for k, v in zip(keys, values) if v is not None]
    return " ".join(parts) or "all"


def panel_title(panel: Panel, common: tuple[tuple[str, Any], ...] = ()) -> str:
    """What sets the panel apart: its options less those every panel of the figure shares."""
    own = [(k, v) for k, v in panel.values if (k, v) not in common]
    return ", ".join(f"{k}={'none' if v is None else v}" for k, v in own) or "every config"
