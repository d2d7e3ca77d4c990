"""Plots of a sweep, written beside its results and logged to the parent run.

* stranded slots and leaked pages over page_size x block_size, one heatmap per policy
* reserved-but-unwritten slots: aligned over unaligned, the cost of the fix
* throughput and peak memory over page_size, one line per algorithm
Cells average over the other axes; empty plots are skipped, not drawn blank.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np


def _agg(rows: list[dict[str, Any]], keys: tuple[str, ...], metric: str) -> dict[tuple, float]:
    groups: dict[tuple, list[float]] = defaultdict(list)
    for row in rows:
        cfg, m = row.get("config") or {}, row.get("metrics") or {}
        if row.get("status") == "failed" or not isinstance(m.get(metric), (int, float)):
            continue
        groups[tuple(_resolved(cfg, k) for k in keys)].append(float(m[metric]))
    return {k: float(np.mean(v)) for k, v in groups.items()}


def _resolved(cfg: dict[str, Any], key: str) -> Any:
    defaults = {"policy": "aligned", "free_policy": "host_pages", "spec": "none", "page_size": 16}
    return cfg.get(key, defaults.get(key))


def _sort(values) -> list:
    return sorted(values, key=lambda v: (v is None, v if not isinstance(v, str) else 0, str(v)))


def write_plots(rows: list[dict[str, Any]], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    dflash = [r for r in rows if _resolved(r.get("config") or {}, "spec") == "dflash"]

    for metric, label in (("peak_stranded_slots", "peak stranded slots"), ("leaked_pages", "leaked pages")):
        cells = _agg(dflash, ("policy", "page_size", "block_size"), metric)
        policies = _sort({k[0] for k in cells})
        if not policies:
            continue
        top = max(max(cells.values()), 1.0)  # one scale for both policies: the fix reads as white
        fig, axes = plt.subplots(1, len(policies), figsize=(4.5 * len(policies), 3.8), squeeze=False)
        for ax, policy in zip(axes[0], policies):
            pss = _sort({k[1] for k in cells if k[0] == policy})
            bss = _sort({k[2] for k in cells if k[0] == policy})
            grid = np.full((len(bss), len(pss)), np.nan)
            for (pol, ps, bs), v in cells.items():
                if pol == policy:
                    grid[bss.index(bs), pss.index(ps)] = v
            im = ax.imshow(grid, cmap="Reds", aspect="auto", origin="lower", vmin=0, vmax=top)
            ax.set_xticks(range(len(pss)), [str(p) for p in pss])
            ax.set_yticks(range(len(bss)), [str(b) for b in bss])
            ax.set_xlabel("page_size")
            ax.set_ylabel("block_size")
            ax.set_title(f"{label}: {policy}")
            for (i, j), v in np.ndenumerate(grid):
                if not np.isnan(v):
                    ax.text(j, i, f"{v:.0f}", ha="center", va="center", fontsize=8)
            fig.colorbar(im, ax=ax)
        fig.suptitle(f"DFLASH {label} (mean over other axes)")
        fig.tight_layout()
        written.append(_save(fig, out / f"{metric}_heatmap.png"))

    cells = _agg(rows, ("spec", "page_size", "policy"), "peak_reserved_slots")
    pairs = sorted({(s, ps) for s, ps, pol in cells if (s, ps, "aligned") in cells and (s, ps, "unaligned") in cells},
                   key=lambda k: (str(k[0]), k[1]))
    if pairs:
        fig, ax = plt.subplots(figsize=(7, 3.8))
        labels = [f"{s}\nps={ps}" for s, ps in pairs]
        extra = [cells[(s, ps, "aligned")] - cells[(s, ps, "unaligned")] for s, ps in pairs]
        ax.bar(range(len(pairs)), extra, color="tab:blue")
        ax.set_xticks(range(len(pairs)), labels, fontsize=7)
        ax.axhline(0, color="black", lw=0.6)
        ax.set_ylabel("aligned - unaligned")
        ax.set_title("peak reserved-but-unwritten slots: overhead of alignment")
        fig.tight_layout()
        written.append(_save(fig, out / "reserved_overhead.png"))

    for metric, label in (("output_tokens_per_s", "output tokens/s"), ("rss_peak_bytes", "peak RSS bytes"),
                          ("mem_torch_peak_bytes", "torch peak bytes")):
        cells = _agg(rows, ("spec", "page_size"), metric)
        if not cells:
            continue
        fig, ax = plt.subplots(figsize=(6, 3.8))
        for spec in _sort({k[0] for k in cells}):
            pss = _sort({k[1] for k in cells if k[0] == spec})
            ax.plot([str(p) for p in pss], [cells[(spec, p)] for p in pss], marker="o", label=str(spec))
        ax.set_xlabel("page_size")
        ax.set_ylabel(label)
        ax.set_title(f"{label} over page_size")
        ax.legend()
        fig.tight_layout()
        written.append(_save(fig, out / f"{metric}.png"))
    return written


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
    if "held" in series:
        pages = slots.twinx()
        pages.plot(series["held"], color="tab:green", lw=1, label="pages held")
        pages.set_ylabel("pages held")
    slots.legend(fontsize=7, loc="upper left")
    slots.set_title(str(row.get("test_id") or row.get("key"))[:90], fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=72)
    return path
