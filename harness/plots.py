"""Plots of a sweep, written beside its results and logged to the parent run.

* stranded slots and leaked pages over page_size x draft shape (DFLASH block_size,
  EAGLE topk), one panel per reservation policy and free policy
* what alignment costs in reserved-but-unwritten slots, from pairs of configs that
  differ only in the policy, per running request in pages (DESIGN: under one page)
* throughput and peak memory over page_size, a line per algorithm and policy, a
  panel per model backend

Only like is drawn with like: averaging a real-model config with accounting-only
ones, or a dedup free (which never leaks) with a host_pages one, gives figures no
config measured. What a cell or point still folds together (window, workload...)
is named in its title. Empty plots are skipped, not drawn blank.
"""

from __future__ import annotations

import json
import statistics
import textwrap
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

# The y axis of a heatmap: what sizes one speculative step's draft.
DRAFT_AXIS = {"dflash": "block_size", "eagle": "topk"}
HEATMAPS = (("peak_stranded_slots", "peak stranded slots"), ("leaked_pages", "leaked pages after drain"))
LINES = (("output_tokens_per_s", "output tokens/s", 1.0), ("rss_peak_bytes", "peak RSS (MiB)", 2.0**20),
         ("mem_torch_peak_bytes", "torch peak memory (MiB)", 2.0**20))
DEFAULTS = {"policy": "aligned", "free_policy": "host_pages", "spec": "none", "page_size": 16, "model": "none"}


def _opt(row: dict[str, Any], key: str) -> Any:
    if key == "policy":
        return _variant(row)
    return (row.get("config") or {}).get(key, DEFAULTS.get(key))


def _variant(row: dict[str, Any]) -> Any:
    """What the accounting follows: the profile (a run of older code names its policy)."""
    cfg = row.get("config") or {}
    if cfg.get("profile") is not None:
        name = cfg["profile"] + (" (what-if)" if cfg["profile"] == "floor-free" else "")
        return name if cfg.get("policy") is None else f"{name} {cfg['policy']}"
    return cfg.get("policy", DEFAULTS["policy"])


# Pairs whose reserved slots differ by what alignment costs: the aligned writer first.
# sglang-0.5.23 vs sglang-pre-35265 is what PR 35265 costs.
ALIGNMENT_PAIRS = (("aligned", "unaligned"), ("sglang-0.5.23", "sglang-pre-35265"))


def _measured(rows: list[dict[str, Any]], metric: str) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("status") != "failed"
            and isinstance((r.get("metrics") or {}).get(metric), (int, float))]


def _sort(values) -> list:
    return sorted(values, key=lambda v: (v is None, v if isinstance(v, (int, float)) else 0, str(v)))


def _folded(rows: list[dict[str, Any]], shown: tuple[str, ...]) -> str:
    """The options that differ between configs drawn as one cell or point."""
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[tuple(repr(_opt(r, k)) for k in shown)].append(r)
    keys = {k for r in rows for k in (r.get("config") or {})} - set(shown) - {"seed"}
    varying = sorted(k for k in keys if any(len({repr(_opt(r, k)) for r in g}) > 1 for g in groups.values()))
    return ", ".join(varying) or "nothing else"


def heatmap_cells(rows: list[dict[str, Any]], metric: str) -> dict[tuple, dict[tuple, float]]:
    """(spec, policy, free_policy) -> {(draft size, page_size): worst value}.

    The worst (max) config, not the mean: one config that reproduces the bug must
    show, and an aligned panel of zeros then says no config stranded or leaked."""
    panels: dict[tuple, dict[tuple, float]] = defaultdict(dict)
    for row in _measured(rows, metric):
        spec = _opt(row, "spec")
        if spec not in DRAFT_AXIS:
            continue
        cell = (_opt(row, DRAFT_AXIS[spec]), _opt(row, "page_size"))
        panel = panels[(spec, _opt(row, "policy"), _opt(row, "free_policy"))]
        panel[cell] = max(panel.get(cell, 0.0), float(row["metrics"][metric]))
    return dict(panels)


def alignment_overhead(rows: list[dict[str, Any]]) -> dict[tuple, list[tuple[float, float]]]:
    """(spec, page_size) -> [(extra slots, extra pages per running request)], one per
    pair of configs identical but for the policy."""
    twins: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for row in _measured(rows, "peak_reserved_slots"):
        rest = {k: v for k, v in (row.get("config") or {}).items() if k not in ("policy", "profile")}
        twins[json.dumps(rest, sort_keys=True, default=str)][_opt(row, "policy")] = row
    out: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    for pair in twins.values():
        names = next((p for p in ALIGNMENT_PAIRS if p[0] in pair and p[1] in pair), None)
        if names is None:
            continue
        a, u = pair[names[0]], pair[names[1]]
        ps = _opt(a, "page_size")
        running = a["metrics"].get("peak_running") or _opt(a, "num_requests") or 1
        extra = float(a["metrics"]["peak_reserved_slots"] - u["metrics"]["peak_reserved_slots"])
        out[(_opt(a, "spec"), ps)].append((extra, extra / (ps * running)))
    return dict(out)


def write_plots(rows: list[dict[str, Any]], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    out.mkdir(parents=True, exist_ok=True)
    written = [_heatmap(rows, metric, label, out / f"{metric}_heatmap.png") for metric, label in HEATMAPS]
    written.append(_overhead(rows, out / "reserved_overhead.png"))
    written += [_lines(rows, metric, label, scale, out / f"{metric}.png") for metric, label, scale in LINES]
    return [p for p in written if p is not None]


def _heatmap(rows: list[dict[str, Any]], metric: str, label: str, path: Path) -> Path | None:
    import matplotlib.pyplot as plt

    panels = heatmap_cells(rows, metric)
    if not panels:
        return None
    specs = _sort({k[0] for k in panels})
    columns = _sort({k[1:] for k in panels})
    top = max(max(max(c.values()) for c in panels.values()), 1.0)  # one scale: a fixed panel reads white
    fig, axes = plt.subplots(len(specs), len(columns), figsize=(4.2 * len(columns), 3.4 * len(specs)), squeeze=False)
    for r, spec in enumerate(specs):
        for c, (policy, free) in enumerate(columns):
            ax = axes[r][c]
            cells = panels.get((spec, policy, free))
            if cells is None:
                ax.set_axis_off()
                continue
            ys, pss = _sort({k[0] for k in cells}), _sort({k[1] for k in cells})
            grid = np.full((len(ys), len(pss)), np.nan)
            for (y, ps), v in cells.items():
                grid[ys.index(y), pss.index(ps)] = v
            im = ax.imshow(grid, cmap="Reds", aspect="auto", origin="lower", vmin=0, vmax=top)
            ax.set_xticks(range(len(pss)), [str(p) for p in pss])
            ax.set_yticks(range(len(ys)), [str(y) for y in ys])
            ax.set_xlabel("page_size (slots)")
            ax.set_ylabel(f"{spec} {DRAFT_AXIS[spec]}")
            ax.set_title(f"{spec}: {policy}" + ("" if free is None else f", {free} free"), fontsize=9)
            for (i, j), v in np.ndenumerate(grid):
                if not np.isnan(v):
                    ax.text(j, i, f"{v:.0f}", ha="center", va="center", fontsize=9,
                            color="white" if v > 0.6 * top else "black")
            fig.colorbar(im, ax=ax)
    drawn = [r for r in _measured(rows, metric) if _opt(r, "spec") in DRAFT_AXIS]
    folded = _folded(drawn, ("spec", "policy", "free_policy", "page_size", *DRAFT_AXIS.values()))
    _suptitle(fig, f"{label} (a cell is the worst config over: {folded})")
    fig.tight_layout()
    return _save(fig, path)


def _overhead(rows: list[dict[str, Any]], path: Path) -> Path | None:
    import matplotlib.pyplot as plt

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
    ax.set_title("what alignment costs: peak reserved-but-unwritten slots, aligned - unaligned\n"
                 f"(mean over {sum(len(g) for g in groups.values())} pairs of configs that differ only in the "
                 "profile: sglang-0.5.23 - sglang-pre-35265)",
                 fontsize=9)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return _save(fig, path)


def _lines(rows: list[dict[str, Any]], metric: str, label: str, scale: float, path: Path) -> Path | None:
    import matplotlib.pyplot as plt

    measured = _measured(rows, metric)
    if not measured:
        return None
    models = _sort({_opt(r, "model") for r in measured})
    fig, axes = plt.subplots(1, len(models), figsize=(5.5 * len(models), 3.8), squeeze=False)
    for ax, model in zip(axes[0], models):
        points: dict[tuple, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
        for r in measured:
            if _opt(r, "model") == model:
                points[(_opt(r, "spec"), _opt(r, "policy"))][_opt(r, "page_size")].append(r["metrics"][metric] / scale)
        for (spec, policy), by_ps in sorted(points.items(), key=lambda kv: str(kv[0])):
            pss = _sort(by_ps)
            ax.plot(range(len(pss)), [statistics.median(by_ps[p]) for p in pss], marker="o", label=f"{spec}, {policy}")
            ax.set_xticks(range(len(pss)), [str(p) for p in pss])
        ax.set_xlabel("page_size (slots)")
        ax.set_ylabel(label)
        ax.set_title(f"model {model}" + (" (accounting only)" if model == "none" else ""), fontsize=9)
        ax.legend(fontsize=7)
    _suptitle(fig, f"{label} over page_size (median over: {_folded(measured, ('model', 'spec', 'policy', 'page_size'))})")
    fig.tight_layout()
    return _save(fig, path)


def _suptitle(fig, text: str) -> None:
    # A long list of folded options ran off both edges of a narrow figure: wrap it.
    fig.suptitle(textwrap.fill(text, width=int(fig.get_figwidth() * 13)), fontsize=10)


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def series_plot(row: dict[str, Any], path: Path) -> Path | None:
    """One config's per-step stranded and reserved-but-unwritten slots, and pages held.

    Drawn for every config of a sweep, so it is kept cheap: one axes, a twin for
    pages, no layout pass."""
    series = {k: v for k, v in (row.get("series") or {}).items() if isinstance(v, list) and v}
    if not series:
        return None
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 3))
    slots = fig.add_axes((0.1, 0.15, 0.78, 0.72))
    for name, colour in (("stranded", "tab:red"), ("reserved", "tab:blue")):
        if name in series:
            slots.plot(series[name], label=f"{name} slots", lw=1, color=colour)
    slots.set_xlabel("step")
    slots.set_ylabel("slots")
    lines = slots.get_lines()
    if "held" in series:
        pages = slots.twinx()
        lines += pages.plot(series["held"], color="tab:green", lw=1, label="pages held (right axis)")
        pages.set_ylabel("pages held")
    # One legend for both axes: the green line had none, only the right-hand label.
    slots.legend(lines, [ln.get_label() for ln in lines], fontsize=7, loc="upper right")
    slots.set_title(str(row.get("test_id") or row.get("key"))[:90], fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=72)
    return path
