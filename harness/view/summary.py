"""The table a sweep prints at the end: figures straight from results.jsonl.

Which figures are columns, their heads and units, and how a large sweep folds them
per algorithm and policy are declared with the metric (harness/core/metrics.py: column,
head, rollup); this file only lays them out.
"""

from __future__ import annotations

from typing import Any

from harness.core.metrics import COLUMNS, bookkeeping_only
from harness.core.run_names import short_name
from harness.judge.expect import PASSING
from harness.store.results import RunDir
from harness.view.capacity_report import short_fits

# Heads carry their unit ("stranded" alone did not say peak slots) and stack on
# lines, so the table fits a terminal: only the config column folds, never a figure.
ROLLED = tuple(m for m in COLUMNS if m.rollup)  # the grouped table's figures
FULL_TABLE_MAX = 60  # above this, only the configs that need a look
NARROW = 120  # columns below which the config names go under the table
FITS_HEAD = "5090/H100\n/H200"  # the capacity cell's GPU profiles (harness/run/capacity.py GPUS), in order


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.0f}" if abs(value) >= 100 else f"{value:.2f}"
    return str(value)


def violations_text(row: dict[str, Any]) -> str:
    v = {k: c for k, c in (row.get("violations") or {}).items() if isinstance(c, (int, float)) and c}
    return " ".join(f"{k}:{c}" for k, c in sorted(v.items())) or "0"


def verdict_text(row: dict[str, Any]) -> str:
    """The verdict, and the status where the verdict and violations do not already say
    it (an exhausted pool, a crash): one column less keeps the table in a terminal."""
    verdict, status = str(row.get("verdict")), str(row.get("status"))
    return verdict if status in ("ok", "violated", verdict) else f"{verdict}\n({status})"


def config_name(row: dict[str, Any]) -> str:
    """The config as the table names it: its short run name (harness/core/run_names.py), the
    same words as MLflow's runs, narrow enough that the column survives 80 columns."""

    return short_name(row["test_id"]) if row.get("test_id") else row["key"]


def summary_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    out = []
    for row in rows:
        m = row.get("metrics") or {}
        out.append([config_name(row), verdict_text(row),
                    *(fmt(m.get(c.name)) for c in COLUMNS), violations_text(row)])
    return out


def fits_cells(rows: list[dict[str, Any]]) -> list[str] | None:
    """The capacity column (harness/view/capacity_report.py), or None when no config names a
    model shape (model none sizes no pool): a column of dashes would only cost width."""

    cache: dict = {}
    cells = [short_fits(row, cache) for row in rows]
    return cells if any(c != "-" for c in cells) else None


def planner_note(rows: list[dict[str, Any]]) -> str:
    """What the rate column measures for accounting-only configs: the host planner, not a model."""
    rates = [c for c in COLUMNS if c.is_rate]
    none = sum(bookkeeping_only(r.get("config") or {}) for r in rows)
    if not rates or not none:
        return ""
    heads = " and ".join(" ".join(c.column_head.split()) for c in rates)
    return (f"{heads}: for the {none} config{'s' if none != 1 else ''} of model none, the host planner's speed "
            "(accounting alone, no forward pass), not a model's serving speed")


def counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    c = {"ok": 0, "as_expected": 0, "unexpected": 0, "failed": 0}
    for row in rows:
        v = row.get("verdict")
        c[v if v in c else "unexpected"] += 1
    return c


GROUP_BY = ("spec", "policy", "free_policy")


def group_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    """One line per (spec, policy, free policy): how many configs, what they summed to."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        cfg = row.get("config") or {}
        # A run of older code names its policy where a profile is now.
        key = {k: cfg.get("profile") if k == "policy" and cfg.get("profile") else cfg.get(k) for k in GROUP_BY}
        groups.setdefault(tuple(str(key[k]) for k in GROUP_BY), []).append(row)
    out = []
    for key, members in sorted(groups.items()):
        c = counts(members)
        m = [r.get("metrics") or {} for r in members]
        viol: dict[str, int] = {}
        for r in members:
            for k, v in (r.get("violations") or {}).items():
                if isinstance(v, (int, float)) and v:
                    viol[k] = viol.get(k, 0) + int(v)
        out.append([*key, str(len(members)), str(c["ok"]), str(c["as_expected"]), str(c["unexpected"] + c["failed"]),
                    *(fmt(_rollup(c.rollup, [x.get(c.name, 0) for x in m])) for c in ROLLED),
                    " ".join(f"{k}:{v}" for k, v in sorted(viol.items())) or "0"])
    return out


def _rollup(how: str, values: list[Any]) -> Any:
    return max(values, default=0) if how == "max" else sum(values)


def print_summary(console, rows: list[dict[str, Any]], run_dir: RunDir, wall_s: float, mlflow_note: str,
                  ran: int | None = None) -> None:
    """``ran``: configs this attempt ran (a resumed run's rows include earlier attempts)."""
    from rich.table import Table  # rich: optional, loaded only on this path

    if len(rows) > FULL_TABLE_MAX:
        table = Table(title=f"{len(rows)} configs by algorithm and policy")
        for head in ("spec", "policy", "free"):
            table.add_column(head, no_wrap=True)
        rolled = (f"{c.rollup}\n{c.column_head}" for c in ROLLED)
        for head in ("configs", "ok", "as\nexpected", "unexpected\nor failed", *rolled):
            table.add_column(head, no_wrap=True, justify="right")
        table.add_column("violations (sum)", min_width=8)  # the one column that may wrap
        for cells in group_rows(rows):
            table.add_row(*cells)
        console.print(table)
    shown = rows if len(rows) <= FULL_TABLE_MAX else [r for r in rows if r.get("verdict") not in PASSING]
    if shown:
        fits = fits_cells(shown)
        cells_of = [cells + [f] for cells, f in zip(summary_rows(shown), fits)] if fits else summary_rows(shown)
        sized = fits is not None
        # The capacity column takes 15 more: below that the table would crop it.
        if console.width < NARROW + (15 if sized else 0):
            # Ten columns do not fit 80: rich gave the config column no width at all, so
            # every row lost its name. A narrow terminal gets one labelled line a config.
            for cells in cells_of:
                figures = ", ".join(f"{' '.join(c.column_head.split())} {v}" for c, v in zip(COLUMNS, cells[2:]))
                cap = f"; requests fit {FITS_HEAD.replace(chr(10), '')} {cells[-1]}" if sized else ""
                console.print(f"{cells[0]}: {' '.join(cells[1].split())}; {figures}; violations "
                              f"{cells[-2] if sized else cells[-1]}{cap}",
                              markup=False, highlight=False)
        else:
            table = Table(title=None if shown is rows else f"{len(shown)} configs that need a look (of {len(rows)})")
            table.add_column("config", overflow="fold", min_width=16)
            table.add_column("verdict", no_wrap=True)
            for c in COLUMNS:
                table.add_column(c.column_head, no_wrap=True, justify="right")
            table.add_column("violations", no_wrap=True)
            if sized:
                table.add_column(f"requests fit\n{FITS_HEAD}", no_wrap=True, justify="right")
            for cells in cells_of:
                table.add_row(*cells)
            console.print(table)
        planner = planner_note(shown)
        if planner:
            console.print(planner, markup=False, highlight=False)
        for row in shown:
            if row.get("verdict") not in PASSING:
                console.print(f"  {row.get('test_id') or row['key']}: {'; '.join(row.get('reasons') or [])}")
    c = counts(rows)
    ran = len(rows) if ran is None else ran
    rate = f", {60 * ran / wall_s:.0f} configs/min" if wall_s > 0 and ran else ""
    console.print(f"{len(rows)} configs: {c['ok']} ok, {c['as_expected']} as expected, {c['unexpected']} unexpected, "
                  f"{c['failed']} failed; {ran} run in {wall_s:.1f} s{rate}")
    console.print(f"results: {run_dir.results}")
    if run_dir.plots.is_dir() and any(run_dir.plots.glob("*.png")):
        console.print(f"plots: {run_dir.plots}")
    console.print(mlflow_note)
    run = run_dir.run_id
    console.print(f"next: kvbench ui (browse the runs) · kvbench compare {run} · "
                  f"kvbench report {run} --out report.html", markup=False, highlight=False)
