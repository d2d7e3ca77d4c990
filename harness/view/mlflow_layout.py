"""What a sweep looks like in MLflow: metric names, tags, notes, the parent's aggregates.

Pure functions of result rows and meta.json; harness/view/mlflow_log.py makes the calls.
Metric names come from the declared schema (harness/core/metrics.py): ``group/name``,
so MLflow draws one section per group (memory, invariants, throughput, ...), and
series under ``group/series/name``; a config run's headline figures and its verdict
come first, in the section ``at a glance`` that MLflow sorts before the groups. A parent run carries, per value of the axes a
dashboard charts (page_size, block_size, window), the sweep's peak token slots and
KV bytes held, stranded slots, leaked token slots and throughput medians, so that one metric of the
parent runs of successive nights is a trend line. It opens on its own ``at a glance``
(SWEEP_HEADLINE): the night's verdict and peaks, duplicated from those.
"""

from __future__ import annotations

import re
import statistics
from importlib.metadata import version
from typing import Any

from harness.core import run_tags
from harness.core.metrics import (BOOKKEEPING, HEADLINE, HEADLINE_SECTION, HEADLINE_VERDICT, METRICS, SWEEP_HEADLINE,
                                  bookkeeping_only, lookup, row_metrics, series)
from harness.judge.expect import PASSING

SERIES_POINTS = 256  # step metrics per series; the full series is in the row artifact
AXES = ("page_size", "block_size", "window")
# (metric, how the configs of one axis value fold into one number)
# Memory in token slots and KV bytes (harness/core/kv_units.py): pages are not comparable across page sizes.
AGGREGATES = (("peak_tokens_held", "max"), ("peak_swa_tokens_held", "max"), ("peak_kv_bytes_held", "max"),
              ("peak_stranded_slots", "max"), ("leaked_tokens", "sum"), ("leaked_swa_tokens", "sum"),
              ("output_tokens_per_s", "median"))
_FOLD = {"max": max, "sum": sum, "median": statistics.median}
VERDICT_PASS = f"{HEADLINE_SECTION}/{HEADLINE_VERDICT}"  # a config's verdict, charted: 1 pass, 0 not
assert all(tuple(n.split(".")) in AGGREGATES for n, _, _ in SWEEP_HEADLINE if "." in n), \
    "a folded sweep headline is not one of the parent's aggregates"


def kvbench_version() -> str:
    try:
        return version("kvbench")
    except Exception:
        return "unknown"


# Tags every run of a sweep carries (the parent's are copied to its config runs), so
# `tags.hardware_profile = 'cpu'` or a commit finds config runs as well as parents; who
# made the run (runner, trigger, CI run, PR) is declared in harness/core/run_tags.py.
CONTEXT_TAGS = ("suite", "hardware_profile", "gpu_name", "commit", "git_commit", "mlflow.source.git.commit",
                "kvbench_version", "driver", "torch_version", "triton_version", *run_tags.NAMES)


def context_tags(meta: dict[str, Any]) -> dict[str, str]:
    """The sweep's context, on the parent and (copied) on every config run."""
    hw = meta.get("hardware") or {}
    commit = meta.get("git_commit") or "unknown"
    return {
        "suite": str(meta.get("suite", "")),
        "hardware_profile": hw.get("profile") or "cpu",
        "gpu_name": hw.get("gpu_name") or "none",
        "commit": commit,
        "git_commit": commit,
        "mlflow.source.git.commit": commit,
        "kvbench_version": kvbench_version(),
        "driver": hw.get("driver") or "none",
        "torch_version": hw.get("torch_version") or "none",
        "triton_version": hw.get("triton_version") or "none",
        **run_tags.run_tags(meta),
    }


def profile_of(config: dict[str, Any]) -> str:
    """The accounting profile a config ran under; the reservation policy where the
    engine has no profile option."""
    config = config or {}
    return str(config.get("profile") or config.get("policy") or "none")


def config_tags(row: dict[str, Any]) -> dict[str, str]:
    config = row.get("config") or {}
    model = config.get("model", "none")
    return {
        "profile": profile_of(config),
        "model": str(model),
        "throughput_meaning": BOOKKEEPING if bookkeeping_only(config) else f"serving speed of model {model}",
        "mlflow.note.content": config_note(row),
        # One warm run is a single sample: no spread, and nights apart it is noise, not a trend.
        "kvbench.timings": f"median of {row.get('repeat')} runs" if repeated(row) else "single sample",
    }


def repeated(row: dict[str, Any]) -> bool:
    """Timed more than once (the suite's repeat), so a median and a spread exist."""
    return isinstance(row.get("repeat"), int) and row["repeat"] > 1


def headline_tags(row: dict[str, Any]) -> dict[str, str]:
    """The tag a run's page shows first (MLflow lists tags as they were set, above the
    description): its peak memory in token slots, short enough not to be cut."""
    m = row.get("metrics") or {}
    if not isinstance(m.get("peak_tokens_held"), (int, float)):
        return {}
    text = f"{m['peak_tokens_held']:,} token slots held"
    if isinstance(m.get("peak_kv_bytes_held"), (int, float)):
        text += f", {m['peak_kv_bytes_held'] / 2**20:,.1f} MiB KV"
    return {"peak_memory": text}


def memory_line(row: dict[str, Any]) -> str:
    """The run's memory in token slots (and KV bytes where the shape is known) first: the
    figure that compares across page sizes, on the first screen of the run's page."""
    m, ps = row.get("metrics") or {}, (row.get("config") or {}).get("page_size")
    if "peak_tokens_held" not in m:
        return ""
    text = f"**Memory:** peak {m['peak_tokens_held']:,} token slots held ({m.get('peak_pages_held', '?')} pages of {ps})"
    if isinstance(m.get("peak_kv_bytes_held"), (int, float)):
        text += f", {m['peak_kv_bytes_held'] / 2**20:,.2f} MiB of KV"
    return (text + f"; peak reserved {m.get('peak_reserved_slots', '?')} and stranded "
            f"{m.get('peak_stranded_slots', '?')} slots; {m.get('leaked_tokens', '?')} token slots leaked.")


def config_note(row: dict[str, Any]) -> str:
    lines = [f"**{row.get('test_id') or row.get('key')}** ({row.get('status')}, verdict {row.get('verdict')})", ""]
    if memory_line(row):
        lines += [memory_line(row), ""]
    if bookkeeping_only(row.get("config") or {}):
        lines += ["The throughput section of this run is **bookkeeping speed**: model `none` runs the accounting "
                  "alone, with no forward pass. It is not a serving figure.", ""]
    repeat = row.get("repeat") or 1
    lines.append(f"Timings: median of {repeat} warm run(s) after one warmup run; `.iqr` metrics are their "
                 "interquartile range." if repeat > 1 else
                 "Timings: one run after a warmup run (the suite's repeat is 1), so no spread is measured.")
    if row.get("reasons"):
        # a passing row's reasons are notes: rules on figures its engine does not measure (harness/judge/expect.py)
        head = "Notes: " if row.get("verdict") in ("ok", "as_expected") else "Why not as expected: "
        lines += ["", head + "; ".join(map(str, row["reasons"]))]
    return "\n".join(lines)


def schema_note() -> str:
    """The metric legend, a markdown table logged on the parent run (MLflow has no metric descriptions)."""
    lines = ["# kvbench metrics", "", "Config runs carry these; a parent carries the sweep's aggregates of some "
             "(`<group>/<name>.<max|sum|median>/<axis>_<value>`, e.g. `memory/peak_tokens_held.max/all`) and the "
             "verdict counts (`sweep/`).", "",
             "| metric | unit | kind | help |", "|---|---|---|---|"]
    rows = [(m.mlflow_name, m.unit, m.kind, f"{m.help}; with model none: {BOOKKEEPING}" if m.is_rate else m.help)
            for m in METRICS.values()]
    rows.append((VERDICT_PASS, "1 = pass", "verdict", "1 when the config ran as the suite expects (verdict ok or "
                 "as_expected), 0 when unexpected or failed"))
    rows += [(f"{HEADLINE_SECTION}/{name}", unit, "sweep", f"the parent's: {help}")
             for name, unit, help in SWEEP_HEADLINE]
    lines += [f"| `{name}` | {unit} | {kind} | {help} |" for name, unit, kind, help in sorted(rows)]
    return "\n".join(lines)


def iqr(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[2] - q[0]


def scalar_metrics(row: dict[str, Any]) -> dict[str, float]:
    """MLflow name -> value: the headline figures and the verdict first (MLflow's compare-runs
    view starts on the first metric a run logged), then every declared scalar and the IQR
    of each repeated timing."""
    figures = row_metrics(row)
    out = {lookup(name).mlflow_name: figures[name] for name in HEADLINE if name in figures}
    if row.get("verdict") is not None:
        out[VERDICT_PASS] = float(row["verdict"] in PASSING)
    out.update({lookup(name).mlflow_name: v for name, v in figures.items()})
    for name, samples in (row.get("samples") or {}).items():
        if isinstance(samples, list) and len(samples) > 1:
            out[f"{lookup(name).mlflow_name}.iqr"] = iqr([float(s) for s in samples])
    return out


def downsample(values: list[Any]) -> list[tuple[int, float]]:
    n = len(values)
    stride = max(1, -(-n // SERIES_POINTS))
    picked = list(range(0, n, stride))
    if n and picked[-1] != n - 1:
        picked.append(n - 1)  # keep the final step: it shows what is left after drain
    return [(i, float(values[i])) for i in picked]


def series_metrics(row: dict[str, Any]) -> list[tuple[str, int, float]]:
    out = []
    for name, values in (row.get("series") or {}).items():
        if isinstance(values, list) and values:
            key = series(name).mlflow_name
            out.extend((key, step, v) for step, v in downsample(values))
    return out


def _piece(value: Any) -> str:
    return re.sub(r"[^\w.-]", "_", "none" if value is None else str(value))


def sweep_aggregates(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Per axis value, the sweep's figures: ``memory/peak_tokens_held.max/page_size_16``.

    Throughput folds only configs of one model backend (``.model_none`` is the
    bookkeeping's speed) and only repeated ones: a single sample charted night after
    night is noise drawn as a trend. Failed configs measured nothing and are left out."""
    out: dict[str, float] = {}
    measured = [r for r in rows if r.get("status") != "failed"]
    for metric, how in AGGREGATES:
        m = lookup(metric)
        slices: dict[str, list[float]] = {}
        for r in measured:
            value = (r.get("metrics") or {}).get(metric)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or (m.gate == "noise" and not repeated(r)):
                continue
            config = r.get("config") or {}
            name = f"{m.group_name}.{how}"
            if m.is_rate:
                name += f".model_{_piece(config.get('model', 'none'))}"
            slices.setdefault(f"{name}/all", []).append(float(value))
            for axis in AXES:  # no window is a value of its axis; no block_size (EAGLE) is not
                if axis in config and (config[axis] is not None or axis == "window"):
                    slices.setdefault(f"{name}/{axis}_{_piece(config[axis])}", []).append(float(value))
        out.update({k: float(_FOLD[how](v)) for k, v in slices.items()})
    return out


def verdict_metrics(rows: list[dict[str, Any]]) -> dict[str, float]:
    counts = {"sweep/configs": float(len(rows))}
    for v in ("ok", "as_expected", "unexpected", "failed"):
        counts[f"sweep/verdict_{v}"] = float(sum(r.get("verdict") == v for r in rows))
    # Split by whether the suite expects them, under sweep/ (after memory/ in MLflow's
    # alphabetical sections): one "invariants/violations.sum" bar of 60, the expected
    # floor-free leaks, was the first chart a clean night's parent opened on.
    for name, expected in (("sweep/violations_expected", True), ("sweep/violations_unexpected", False)):
        counts[name] = float(sum((r.get("metrics") or {}).get("violations", 0) or 0 for r in rows
                                 if r.get("status") != "failed" and (r.get("verdict") == "as_expected") == expected))
    return counts


def sweep_headline(rows: list[dict[str, Any]]) -> dict[str, float]:
    """The parent's own headline, ``at a glance/<name>`` (SWEEP_HEADLINE): the section sorts
    first, so a parent opened on it rather than on one chart of 0 per axis value. The same
    figures as its verdict counts and ``/all`` aggregates, which keep their names."""
    counts, folds = verdict_metrics(rows), sweep_aggregates(rows)
    found = {"configs_unexpected": counts["sweep/verdict_unexpected"] + counts["sweep/verdict_failed"],
             "violations_unexpected": counts["sweep/violations_unexpected"]}
    for name, _, _ in SWEEP_HEADLINE:
        if "." in name:
            metric, how = name.split(".")
            found[name] = folds.get(f"{lookup(metric).group_name}.{how}/all")
    # In declaration order (MLflow's compare view starts on the first metric logged); a fold
    # of no measured config (every one failed) is left out, not charted as 0.
    return {f"{HEADLINE_SECTION}/{n}": found[n] for n, _, _ in SWEEP_HEADLINE if found.get(n) is not None}


def parent_status(rows: list[dict[str, Any]]) -> str:
    """FINISHED when every config ran as expected, else FAILED (a red run in the list)."""

    return "FINISHED" if rows and all(r.get("verdict") in PASSING for r in rows) else "FAILED"


def profiles(rows: list[dict[str, Any]]) -> str:
    return ",".join(sorted({profile_of(r.get("config") or {}) for r in rows})) or "none"
