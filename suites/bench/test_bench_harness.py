"""What the harness adds on top of the engine, per config of a sweep.

* appending a result row (flock + one write) and loading an invariants-sized run
* compare_rows over an invariants-sized run against its baseline
* one smoke config through the grid session (engine run, verdict, row append), no MLflow
* logging one row to a local sqlite MLflow store (params, metrics, series, artifact)
Each round is one unit of work (a row, a load, a compare, a config, an upload), so
pytest-benchmark's ops/s is the throughput of that unit. Only deterministic
outcomes are asserted; the figures are the report.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from harness.grid.execute import GridSession
from harness.grid.suites import load_suite
from harness.judge.baseline import build
from harness.judge.compare import compare_rows
from harness.store.results import RunDir, append_row, load_rows

pytestmark = [pytest.mark.bench, pytest.mark.benchmark(group="harness")]


def row(i: int) -> dict:
    return {"key": f"spec=dflash,ps=16,seed={i}", "config": {"spec": "dflash", "page_size": 16, "seed": i},
            "metrics": {"steps": 200 + i, "peak_stranded_slots": i % 13, "leaked_pages": i % 3, "syncs": 0,
                        "output_tokens": 5000, "wall_s": 0.1, "output_tokens_per_s": 5e4, "tau": 5.9},
            "series": {k: list(range(200)) for k in ("stranded", "reserved", "held")},
            "violations": {"K1": i % 5}, "status": "ok", "verdict": "ok", "suite": "bench"}


def test_append_row(benchmark, tmp_path):
    path = tmp_path / "results.jsonl"
    r = row(1)
    benchmark(append_row, path, r)
    assert all(x["key"] == r["key"] for x in load_rows(path)[:1])


def test_load_rows_324(benchmark, tmp_path):
    for i in range(324):
        append_row(tmp_path / "results.jsonl", row(i))
    rows = benchmark(load_rows, tmp_path)
    assert len(rows) == 324


def test_compare_324(benchmark):
    rows = [row(i) for i in range(324)]
    base = build(rows, "cpu", "x")[0]
    now = copy.deepcopy(rows)
    now[7]["metrics"]["peak_stranded_slots"] += 1
    report = benchmark(compare_rows, now, base)
    assert [f.key for f in report.regressions] == [rows[7]["key"]]


def test_grid_config_overhead(benchmark, tmp_path):
    suite = load_suite("smoke")
    gc = suite.by_id()["spec:dflash-bs:16-profile:floor-free-ps:16-window:none"]
    runs = iter(range(10**6))

    def one():
        run = RunDir(tmp_path / f"r{next(runs)}")
        run.path.mkdir()
        return GridSession(suite, run).run(gc)

    out = benchmark.pedantic(one, rounds=5, iterations=1)
    assert out["verdict"] == "as_expected"


def test_mlflow_log_row(benchmark, tmp_path: Path):
    from harness.view.mlflow_log import client, ensure_experiment, ensure_parent, log_row

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cl = client(uri)
    exp = ensure_experiment(cl, "kvbench-bench", uri, tmp_path)
    parent = ensure_parent(cl, exp, "bench", {"suite": "bench"})
    keys = iter(range(10**6))

    def one():
        r = row(next(keys))
        return log_row(cl, exp, parent, "bench", r, r["key"], existing=[])

    assert benchmark.pedantic(one, rounds=5, iterations=1)
