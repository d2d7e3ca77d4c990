"""Memory in token slots and KV bytes beside the pages the engine counts.

A page holds ``page_size`` token slots, so a page count says nothing across page
sizes: DFLASH at ps 1 / 16 / 64 holding 1830 / 118 / 35 pages holds 1830 / 1888 /
2240 token slots, more memory where the pages fall. The harness derives, for each
memory figure, its token slots (pages x page_size) and, where the model's shape is
known, its KV bytes (harness/core/kv_shape.py: layers x KV heads x head dim x dtype bytes
x 2 for K and V per slot, the sliding layers' share for the SWA pool). Which figure
derives from which, and how, is declared in harness/core/metrics.py (``of``, ``scale``);
this module only does the arithmetic, so the engine keeps counting pages and knows
nothing of it.
"""

from __future__ import annotations

import math
from typing import Any

from harness.core.kv_shape import KVShape, shape_of
from harness.core.metrics import DERIVED, METRICS, Metric


def derive(config: dict[str, Any], metrics: dict[str, Any], series: dict[str, list] | None = None,
           shape: KVShape | None = None, checkpoints: bool = True) -> dict[str, int]:
    """The derived figures of one run: tokens always, bytes when the shape is known.
    ``shape`` defaults to the config's own (none for the accounting-only backend)."""
    ps = config.get("page_size")
    if not _count(ps) or ps < 1:
        return {}
    ps = int(ps)
    shape = shape if shape is not None else shape_of(config, checkpoints)
    out: dict[str, int] = {}
    for m in DERIVED:
        value = _one(m, ps, shape, {**metrics, **out}, series or {})
        if value is not None:
            out[m.name] = value
    return out


def _one(m: Metric, ps: int, shape: KVShape | None, known: dict[str, Any], series: dict[str, list]) -> int | None:
    if m.scale == "page_size":
        src = known.get(m.of)
        return int(src) * ps if _count(src) else None
    if shape is None:
        return None
    if m.scale == "kv_pools":
        # The two pools peak at different steps: the peak of their sum, step by step.
        held, swa = series.get("held") or [], series.get("swa_held") or []
        if not held or not all(_count(v) for v in [*held, *swa]):
            return None
        swa = list(swa) + [0] * (len(held) - len(swa))
        return max(int(h) * ps * shape.full_bytes + int(s) * ps * shape.swa_bytes for h, s in zip(held, swa))
    src = known.get(m.of)
    if not _count(src):
        return None
    per = {"kv_full": shape.full_bytes, "kv_swa": shape.swa_bytes, "kv_all": shape.all_bytes}[m.scale]
    return int(src) * per


def fill_units(row: dict[str, Any]) -> dict[str, Any]:
    """A row recorded before the token and byte figures existed, with them filled in from
    its pages (the figures it already carries are kept): old nights chart alike."""
    metrics = row.get("metrics")
    if not isinstance(metrics, dict) or not metrics or not isinstance(row.get("config"), dict):
        return row
    if all(m.name in metrics for m in DERIVED if m.scale == "page_size"):
        return row  # recorded with them
    series = row.get("series") if isinstance(row.get("series"), dict) else {}
    try:
        derived = derive(row["config"], metrics, series, checkpoints=False)
    except Exception:  # a hostile or foreign config: the row keeps what it recorded
        return row
    # A copy (the caller's row stays as read), recorded figures first: a check that names
    # the first bad figure names the one on disk, not a figure derived from it.
    return {**row, "metrics": {**metrics, **{k: v for k, v in derived.items() if k not in metrics}}}


def _count(v: Any) -> bool:
    # Only a count derives a count: a negative or non-finite figure is left to the
    # readers' checks to name, not multiplied into a second bad figure.
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def tokens_of(name: str) -> str:
    """The token-slot figure of a page figure (``peak_pages_held`` -> ``peak_tokens_held``),
    the name itself when it has none: what plots and tables show by default."""
    for m in DERIVED:
        if m.of == name and m.scale == "page_size":
            return m.name
    return name


def pages_of(name: str) -> str:
    """The page figure a token-slot figure derives from, the name itself otherwise."""
    m = METRICS.get(name)
    return m.of if m is not None and m.scale == "page_size" else name
