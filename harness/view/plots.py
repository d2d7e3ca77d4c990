"""Plots of a sweep, written beside its results and logged to the parent run.

* stranded and leaked token slots over page_size x draft shape (DFLASH block_size,
  EAGLE topk), one panel per accounting profile (and free rule where overridden)
* what alignment costs in reserved-but-unwritten slots, from pairs of configs that
  differ only in the profile (sglang-0.5.23 vs sglang-pre-35265: what PR 35265
  costs), per running request in pages (DESIGN: under one page)
* memory in token slots (peak held, reserved, stranded, SWA held) against page_size,
  block_size and window: pages are not comparable across page sizes (``units="pages"``
  draws them anyway)
* timings (throughput, host planning time) against page_size: the median of the
  suite's warm repeats with their interquartile range as error bars; with model
  ``none`` the throughput is the bookkeeping's speed and says so

Only like is drawn with like: a line figure gives every option that varies and is
not on its x axis or its lines a panel of its own (harness/view/facets.py), so each
point is one config. Heatmap cells are the worst config, and name what they fold.
Process RSS is not drawn: it follows test order, not the config. Empty plots are
skipped, not drawn blank.
"""

from __future__ import annotations

import io
import json
import statistics
import textwrap
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from harness.core.kv_units import fill_units, pages_of
from harness.core.metrics import BOOKKEEPING, lookup
from harness.core.safe_write import write_bytes
from harness.view.facets import POLICIES, SHAPE, facet, label, measured, opt, panel_title, sort_values, spread
from mini_engine.algos import ALGORITHMS

# The y axis of a heatmap: what sizes one speculative step's draft.
DRAFT_AXIS = {a.name: a.draft_axis for a in ALGORITHMS.values() if a.draft_axis}
HEATMAPS = (("peak_stranded_slots", "peak stranded slots"), ("leaked_tokens", "leaked token slots after drain"))
# Memory in token slots: pages are not comparable across page sizes (harness/core/kv_units.py).
# ``units="pages"`` draws the page counts the engine keeps instead.
MEMORY = ("peak_tokens_held", "peak_reserved_slots", "peak_stranded_slots", "peak_swa_tokens_held")
# x axis (with the options tied to it) -> the lines drawn against it
MEMORY_AXES = {("page_size",): SHAPE + POLICIES, ("block_size",): ("page_size",) + POLICIES,
               ("window", "layer_pattern"): SHAPE + POLICIES}
TIMINGS = ("output_tokens_per_s", "plan_us_per_decode_step", "mem_torch_peak_bytes")


# Pairs of configs whose reserved slots differ by what alignment costs, the aligned
# writer first: sglang-0.5.23 vs sglang-pre-35265 is what PR 35265 costs.
ALIGNMENT_PAIRS = (("sglang-0.5.23", "sglang-pre-35265"), ("aligned", "unaligned"))


def variant(row: dict[str, Any]) -> Any:
    """What the accounting follows: the profile (floor-free named a what-if: no shipped
    version frees that way); a row of older code names its policy."""
    cfg = row.get("config") or {}
    if cfg.get("profile") is not None:
        name = cfg["profile"] + (" (what-if)" if cfg["profile"] == "floor-free" else "")
        return name if cfg.get("policy") is None else f"{name} {cfg['policy']}"
    return opt(row, "policy")


def free_rule(row: dict[str, Any]) -> Any:
    """The free rule when a config overrides its profile's (or an older row's policy)."""
    cfg = row.get("config") or {}
    if cfg.get("profile") is not None:
        return cfg.get("free_policy")
    return opt(row, "free_policy")


def _folded(rows: list[dict[str, Any]], shown: tuple[str, ...]) -> str:
    """The options that differ between configs drawn as one cell or point."""
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[tuple(repr(opt(r, k)) for k in shown)].append(r)
    keys = {k for r in rows for k in (r.get("config") or {})} - set(shown) - {"seed"}
    varying = sorted(k for k in keys if any(len({repr(opt(r, k)) for r in g}) > 1 for g in groups.values()))
    return ", ".join(varying) or "nothing else"


def heatmap_cells(rows: list[dict[str, Any]], metric: str) -> dict[tuple, dict[tuple, float]]:
    """(spec, profile, free rule) -> {(draft size, page_size): worst value}.

    The worst (max) config, not the mean: one config that reproduces the bug must
    show, and an aligned panel of zeros then says no config stranded or leaked."""
    panels: dict[tuple, dict[tuple, float]] = defaultdict(dict)
    for row in measured(rows, metric):
        spec = opt(row, "spec")
        if spec not in DRAFT_AXIS:
            continue
        cell = (opt(row, DRAFT_AXIS[spec]), opt(row, "page_size"))
        panel = panels[(spec, variant(row), free_rule(row))]
        panel[cell] = max(panel.get(cell, 0.0), float(row["metrics"][metric]))
    return dict(panels)


def alignment_overhead(rows: list[dict[str, Any]]) -> dict[tuple, list[tuple[float, float]]]:
    """(spec, page_size) -> [(extra slots, extra pages per running request)], one per
    pair of configs identical but for the policy."""
    twins: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for row in measured(rows, "peak_reserved_slots"):
        rest = {k: v for k, v in (row.get("config") or {}).items() if k not in ("policy", "profile")}
        twins[json.dumps(rest, sort_keys=True, default=str)][variant(row)] = row
    out: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    for pair in twins.values():
        names = next((p for p in ALIGNMENT_PAIRS if p[0] in pair and p[1] in pair), None)
        if names is None:
            continue
        a, u = pair[names[0]], pair[names[1]]
        ps = opt(a, "page_size")
        running = a["metrics"].get("peak_running") or opt(a, "num_requests") or 1
        extra = float(a["metrics"]["peak_reserved_slots"] - u["metrics"]["peak_reserved_slots"])
        out[(opt(a, "spec"), ps)].append((extra, extra / (ps * running)))
    return dict(out)


def write_plots(rows: list[dict[str, Any]], out: Path, units: str = "tokens") -> list[Path]:
    import matplotlib  # matplotlib: optional, loaded only on this path

    matplotlib.use("Agg")
    rows = [fill_units(r) for r in rows]  # rows recorded before the token figures get them
    out.mkdir(parents=True, exist_ok=True)
    memory = MEMORY if units == "tokens" else tuple(pages_of(m) for m in MEMORY)
    heatmaps = HEATMAPS if units == "tokens" else tuple((pages_of(m), t) for m, t in HEATMAPS)
    written = [_heatmap(rows, metric, label, out / f"{metric}_heatmap.png") for metric, label in heatmaps]
    written.append(_overhead(rows, out / "reserved_overhead.png"))
    for x, lines in MEMORY_AXES.items():
        written.append(_grid(rows, memory, x, lines, out / f"memory_vs_{x[0]}.png"))
    written.append(_grid(rows, TIMINGS, ("page_size",), SHAPE + POLICIES, out / "timings_vs_page_size.png"))
    return [p for p in written if p is not None]


def _heatmap(rows: list[dict[str, Any]], metric: str, label: str, path: Path) -> Path | None:
    import matplotlib.pyplot as plt  # matplotlib: optional, loaded only on this path

    panels = heatmap_cells(rows, metric)
    if not panels:
        return None
    specs = sort_values({k[0] for k in panels})
    columns = sort_values({k[1:] for k in panels})
    top = max(max(max(c.values()) for c in panels.values()), 1.0)  # one scale: a fixed panel reads white
    fig, axes = plt.subplots(len(specs), len(columns), figsize=(4.2 * len(columns), 3.4 * len(specs)), squeeze=False)
    for r, spec in enumerate(specs):
        for c, (policy, free) in enumerate(columns):
            ax = axes[r][c]
            cells = panels.get((spec, policy, free))
            if cells is None:
                ax.set_axis_off()
                continue
            ys, pss = sort_values({k[0] for k in cells}), sort_values({k[1] for k in cells})
            grid = np.full((len(ys), len(pss)), np.nan)
            for (y, ps), v in cells.items():
                grid[ys.index(y), pss.index(ps)] = v
            im = ax.imshow(grid, cmap="Reds", aspect="auto", origin="lower", vmin=0, vmax=top)
            ax.set_xticks(range(len(pss)), [str(p) for p in pss])
            ax.set_yticks(range(len(ys)), [str(y) for y in ys])
            ax.set_xlabel("page_size (slots)")
            ax.set_ylabel(f"{spec} {DRAFT_AXIS[spec]}")
            ax.set_title(f"{spec}: {policy}" + (f", {free} free" if free else ""), fontsize=9)
            for (i, j), v in np.ndenumerate(grid):
                if not np.isnan(v):
                    ax.text(j, i, f"{v:.0f}", ha="center", va="center", fontsize=9,
                            color="white" if v > 0.6 * top else "black")
            fig.colorbar(im, ax=ax)
    drawn = [r for r in measured(rows, metric) if opt(r, "spec") in DRAFT_AXIS]
    folded = _folded(drawn, ("spec", "profile", "policy", "free_policy", "page_size", *DRAFT_AXIS.values()))
    _suptitle(fig, f"{label} (a cell is the worst config over: {folded})")
    fig.tight_layout()
    return _save(fig, path)


def _overhead(rows: list[dict[str, Any]], path: Path) -> Path | None:
    import matplotlib.pyplot as plt  # matplotlib: optional, loaded only on this path

    groups = alignment_overhead(rows)
    if not groups:
        return None
    keys = sorted(groups, key=lambda k: (str(k[0]), k[1]))
    pages = [statistics.mean(p for _, p in groups[k]) for k in keys]
    slots = [statistics.mean(s for s, _ in groups[k]) for k in keys]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(keys)), 4.0))
    bars = ax.bar(range(len(keys)), pages, color="tab:blue")
    for bar, s in zip(bars, slots):
        ax.annotate(f"{s:+.0f} slots", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=7)
    ax.axhline(1.0, color="tab:red", ls="--", lw=1, label="one page per request (the DESIGN bound)")
    ax.axhline(0, color="black", lw=0.6)
    ax.set_xticks(range(len(keys)), [f"{s}\nps={ps}" for s, ps in keys], fontsize=8)
    ax.set_ylabel("extra reserved slots\nper running request (pages)")
    ax.set_ylim(min(0.0, *pages) - 0.05, max(1.2, *pages) * 1.1)
    ax.set_title("what alignment costs: peak reserved-but-unwritten slots, aligned - unaligned writer\n"
                 f"(mean over {sum(len(g) for g in groups.values())} pairs of configs that differ only in the profile)",
                 fontsize=9)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return _save(fig, path)


def metric_label(metric: str, rows: list[dict[str, Any]]) -> str:
    """The y label: name and unit; a rate of accounting-only configs is the bookkeeping's speed."""
    m = lookup(metric)
    text = f"{metric.replace('_', ' ')} ({m.unit})"
    if m.is_rate and rows and all(opt(r, "model") == "none" for r in rows):
        text += "\nbookkeeping speed, not serving"
    return text


def _grid(rows: list[dict[str, Any]], metrics: tuple[str, ...], x: tuple[str, ...], lines: tuple[str, ...],
          path: Path) -> Path | None:
    """A row of panels per metric, a panel per value of the options that change the figure."""
    import matplotlib.pyplot as plt  # matplotlib: optional, loaded only on this path

    # A config without the x option (EAGLE has no block_size) is not on this figure;
    # no window is a value of the window axis (all-global attention).
    rows = [r for r in rows if r.get("status") != "failed" and (x[0] == "window" or opt(r, x[0]) is not None)]
    shown = [m for m in metrics if measured(rows, m)]
    xs_all = {tuple(opt(r, k) for k in x) for r in rows}
    if not shown or len(xs_all) < 2:
        return None  # one x value is a point, not a figure
    facets = facet(rows, x, lines)
    cols = len(facets.panels)
    if not cols:
        return None
    fig, axes = plt.subplots(len(shown), cols, figsize=(PANEL_W * cols, PANEL_H * len(shown)), squeeze=False)
    timed = False
    colours: dict[tuple, Any] = {}  # one colour per line across panels, one legend for the figure
    handles: dict[str, Any] = {}
    for i, metric in enumerate(shown):
        scale = 2.0**20 if lookup(metric).unit == "bytes" else 1.0
        for j, panel in enumerate(facets.panels):
            ax = axes[i][j]
            xs = facets.xs(panel)
            drawn = False
            for key, by_x in sorted(panel.lines.items(), key=lambda kv: str(kv[0])):
                pts = [(xs.index(xv), spread(r, metric)) for xv, r in by_x.items() if metric in (r.get("metrics") or {})]
                if not pts:
                    continue
                pts.sort()
                med = np.array([p[1][0] for p in pts]) / scale
                lo = med - np.array([p[1][1] for p in pts]) / scale
                hi = np.array([p[1][2] for p in pts]) / scale - med
                timed |= any(p[1][3] > 1 for p in pts)
                colour = colours.setdefault(key, f"C{len(colours) % 10}")
                marker = "osD^v<>"[len(colours) // 10 % 7]
                h = ax.errorbar([p[0] for p in pts], med, yerr=[lo, hi], marker=marker, ms=3, lw=1, capsize=3,
                                color=colour)
                handles.setdefault(label(key, facets.line_keys), h)
                drawn = True
            if not drawn:
                ax.set_axis_off()
                continue
            if all(v == 0 for ln in ax.get_lines() for v in ln.get_ydata()):
                ax.clear()  # an axes of zero lines (SWA figures of a model without SWA) says it in words
                ax.set_axis_off()
                ax.text(0.5, 0.5, f"{metric.replace('_', ' ')}:\n0 in every config of this panel",
                        ha="center", va="center", fontsize=8, transform=ax.transAxes)
                continue
            positive = [v for ln in ax.get_lines() for v in ln.get_ydata() if v > 0]
            if positive and max(positive) > 50 * min(positive):
                ax.set_yscale("symlog", linthresh=1.0)  # pages at ps 1 and ps 64 differ 60-fold
            ax.set_xticks(range(len(xs)), ["/".join("none" if v is None else str(v) for v in xv) for xv in xs],
                          fontsize=8)
            ax.set_xlabel(" / ".join(x))
            unit = " (MiB)" if scale > 1 else ""
            ax.set_ylabel(metric_label(metric, panel.rows).replace("(bytes)", unit.strip()), fontsize=8)
            title = panel_title(panel, facets.common)
            if lookup(metric).is_rate and all(opt(r, "model") == "none" for r in panel.rows):
                title += "\n" + BOOKKEEPING
            ax.set_title(textwrap.fill(title, 60), fontsize=7)
    what = ("counters: one run per config, exact" if not any(lookup(m).kind in ("timing", "memory") for m in shown)
            else "median and IQR of the warm repeats" if timed else "one warm run per config (suite repeat 1): no spread")
    more = f"; first {cols} of {cols + facets.dropped} panels" if facets.dropped else ""
    if facets.single:
        more += f"; {facets.single} workload(s) run at one {' / '.join(x)} only are left out"
    shared = ", ".join(f"{k}={'none' if v is None else v}" for k, v in facets.common)
    title = _suptitle(fig, f"{', '.join(m.replace('_', ' ') for m in shown)} against {' / '.join(x)} "
                                    f"(a panel per option that changes the figure; {what}{more})"
                                    + (f"; every panel: {shared}" if shared else ""))
    legend_rows = -(-len(handles) // 3)
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=3, fontsize=7, frameon=False)
    _fixed_layout(fig, len(shown), title, legend_rows)
    return _save(fig, path)


# A line figure's panel, in inches, and its margins. The layout is computed, not
# searched: tight_layout measured every text of every panel, a third of the sweep's
# plotting time (seconds a figure on two cores).
PANEL_W, PANEL_H = 4.6, 3.3
LEFT_IN, RIGHT_IN, GAP_W_IN, GAP_H_IN = 0.8, 0.2, 0.85, 0.95


def _fixed_layout(fig, rows: int, title, legend_rows: int) -> None:
    """Grow the figure by its title and legend, then place the panels with room for
    their labels (two-line y labels, three-line titles, the x label)."""
    top_in = 0.55 + 0.2 * (title.get_text().count("\n") + 1)  # the title, then the first row's panel titles
    bottom_in = 0.3 + 0.16 * legend_rows + 0.35
    w, h = fig.get_figwidth(), fig.get_figheight() + top_in + bottom_in
    fig.set_figheight(h)
    title.set_y(1 - 0.08 / h)
    cols = len(fig.axes) // max(1, rows)
    axes_w = (w - LEFT_IN - RIGHT_IN - GAP_W_IN * (cols - 1)) / max(1, cols)
    axes_h = (h - top_in - bottom_in - GAP_H_IN * (rows - 1)) / max(1, rows)
    fig.subplots_adjust(left=LEFT_IN / w, right=1 - RIGHT_IN / w, top=1 - top_in / h, bottom=bottom_in / h,
                        wspace=GAP_W_IN / axes_w, hspace=GAP_H_IN / axes_h)


def _suptitle(fig, text: str):
    """The figure's title, wrapped to its width."""
    # A long list of folded options ran off both edges of a narrow figure: wrap it.
    return fig.suptitle(textwrap.fill(text, width=int(fig.get_figwidth() * 13)), fontsize=10)


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt  # matplotlib: optional, loaded only on this path

    _write_png(fig, path, 90)
    plt.close(fig)
    return path


def _write_png(fig, path: Path, dpi: int) -> None:
    # Drawn in memory and written through safe_write: a plot name in a run directory
    # is never a link out of it, and a reader never sees half an image.

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    write_bytes(path, buf.getvalue(), "plot")
