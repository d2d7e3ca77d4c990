"""One row from a config's repeated runs: the rule the sweep applies to its repeats and
bisect to each candidate's, so a bisected figure means what the sweep's does.

Timings and memory take the median of the timed runs (every sample kept for compare's
noise test and the plots' error bars); counters must agree, the warmup's included.
"""

from __future__ import annotations

import statistics
from typing import Any

from harness.core.metric_kinds import kind


def merge_repeats(runs: list[dict[str, Any]], warmup: dict[str, Any] | None = None) -> dict[str, Any]:
    """One row from repeated runs: counters from the last (they must agree, the
    warmup's included), timings as the median of the timed runs with every sample
    kept for the noise test of compare and the error bars of the plots."""
    checked = [warmup, *runs] if warmup is not None and warmup is not runs[0] else runs
    row = dict(runs[-1])
    if len(checked) == 1:
        return row
    metrics = dict(row.get("metrics") or {})
    samples: dict[str, list[float]] = {}
    differ = []
    for name in metrics:
        values = [r.get("metrics", {}).get(name) for r in checked]
        timed = [r.get("metrics", {}).get(name) for r in runs]
        if kind(name) in ("timing", "memory") and all(isinstance(v, (int, float)) for v in timed):
            metrics[name] = statistics.median(float(v) for v in timed)
            if len(timed) > 1:
                samples[name] = [float(v) for v in timed]
        elif kind(name) == "counter" and any(v != values[0] for v in values):
            differ.append(name)
    statuses = {r.get("status") for r in checked}
    if len(statuses) > 1:
        differ.append("status")
        if "failed" in statuses:
            failed = next(r for r in checked if r.get("status") == "failed")
            row.update(status="failed", error=failed.get("error"))
    row.update(metrics=metrics, repeat=len(runs))
    if samples:
        row["samples"] = samples
    if differ:
        row["nondeterministic"] = differ
    return row
