"""The report's capacity section: for the newest run's configs that name a model shape,
how many requests of their length fit on each GPU profile (harness/run/capacity.py).

Configs of the accounting-only backend (``model none``) load no model and have no
shape, so they are left out; a config is one row per distinct shape, algorithm,
block size, window and profile, across the page sizes it ran at.
"""

from __future__ import annotations

from typing import Any

from harness.core.turns import nominal_length
from harness.run.capacity import GPUS, capacity
from harness.view.templating import render

# The options that change what one request needs or what the pool holds.
SHAPE_KEYS = ("model", "spec", "block_size", "topk", "steps", "num_draft_tokens", "window", "layer_pattern", "profile",
              "page_size", "mem_fraction")


def capacity_rows(rows: list[dict[str, Any]]) -> list[tuple[str, int, list[int]]]:
    """(what, context, requests that fit per GPU profile) for each distinct config with a shape."""
    seen: dict[tuple, tuple[str, int, list[int]]] = {}
    for row in rows:
        cfg = row.get("config") or {}
        if (cfg.get("model") or "none") == "none" or row.get("status") == "failed":
            continue
        context = nominal_length(cfg)
        key = (*(cfg.get(k) for k in SHAPE_KEYS), context)
        if key in seen or context < 1:
            continue
        try:
            fits = [capacity(cfg, context, gpu).requests for gpu in GPUS]
        except Exception:  # a checkpoint no longer on disk: nothing to size
            continue
        what = " ".join(f"{k}={cfg[k]}" for k in SHAPE_KEYS if cfg.get(k) is not None)
        seen[key] = (what, context, fits)
    return list(seen.values())


def short_fits(row: dict[str, Any], cache: dict | None = None) -> str:
    """The sweep table's cell: requests of the config's length that fit on each GPU
    profile, 'RTX 5090/H100/H200' as '37/94/166'; '-' without a model shape."""
    cfg = row.get("config") or {}
    if (cfg.get("model") or "none") == "none" or row.get("status") == "failed":
        return "-"
    context = int(cfg.get("input_len") or 0) + int(cfg.get("output_len") or 0)
    key = (*(cfg.get(k) for k in SHAPE_KEYS), context)
    if cache is not None and key in cache:
        return cache[key]
    try:
        text = "/".join(str(capacity(cfg, context, gpu).requests) for gpu in GPUS) if context > 0 else "-"
    except Exception:  # a checkpoint no longer on disk: nothing to size
        text = "-"
    if cache is not None:
        cache[key] = text
    return text


def capacity_section(rows: list[dict[str, Any]]) -> str:
    return render("capacity", rows=capacity_rows(rows), gpus=[GPUS[g][0] for g in GPUS])
