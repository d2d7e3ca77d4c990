"""kvbench sweep end to end: pytest in-process with xdist workers, a real sqlite MLflow store.

What must hold: the figures the sweep prints are the rows of results.jsonl and the
runs in MLflow (a parent, one child per config); a sweep killed with SIGKILL and
resumed ends with every config exactly once in both; an unreachable tracking URI
loses nothing and kvbench sync uploads it later.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.core.metrics import lookup
from harness.grid.suites import load_suite
from harness.grid.sweep import check_filter
from harness.store.results import RunDir, load_rows
from harness.view.mlflow_log import experiment_name, key_hash
from harness.view.summary import summary_rows

# Eight quick configs: both policies, two page sizes, two seeds; the unaligned
# ones are expected to strand and leak.
SUITE = """
name = "e2e"
[defaults]
spec = "dflash"
block_size = 16
num_requests = 24
input_len = 256
output_len = 128
pool_tokens = 65536
profile = "floor-free"
[axes]
policy = ["aligned", "unaligned"]
page_size = [1, 16]
seed = [1, 2]
[[expect]]
name = "unaligned strands and leaks"
when = { policy = "unaligned", page_size = { min = 2 } }
status = ["violated", "pool_exhausted"]
metrics = { peak_stranded_slots = { min = 1 }, leaked_pages = { equals = "predicted_leaked_pages" } }
violations = { K8 = { min = 1 } }
"""
N_CONFIGS = 8


@pytest.fixture
def suite_file(tmp_path: Path) -> Path:
    p = tmp_path / "e2e.toml"
    p.write_text(SUITE)
    return p


def mlflow_runs(uri: str, suite: str):
    import mlflow

    mlflow.set_tracking_uri(uri)
    exp = mlflow.get_experiment_by_name(experiment_name(suite))
    assert exp is not None
    return mlflow.search_runs([exp.experiment_id], output_format="pandas")


def children_per_key(runs, run_id: str) -> collections.Counter:
    mine = runs[(runs["tags.kvbench.run"] == run_id) & (runs["tags.kvbench.role"] == "config")]
    return collections.Counter(mine["tags.kvbench.key_hash"])


@pytest.mark.slow
def test_sweep_smoke_slice_matches_results_and_mlflow(results_root, cli, capsys):
    rc = cli("sweep", "smoke", "--filter", "ps:16 and not model", "--run-id", "s1", "-j", "2")
    out = capsys.readouterr().out
    rows = load_rows(results_root / "runs" / "s1")
    assert rc == 0, out
    assert len(rows) == 19 and all(r["verdict"] in ("ok", "as_expected") for r in rows)
    assert {r["verdict"] for r in rows} == {"ok", "as_expected"}  # the fix and the bug, both proven
    # Every figure printed is the row's figure.
    printed = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
               for line in out.splitlines() if line.startswith("│")}
    for cells in summary_rows(rows):
        assert printed[cells[0]] == cells[1:]
    assert f"{len(rows)} configs:" in out
    smoke = load_suite("smoke")
    assert f"{len(smoke.configs)} configs ({check_filter('ps:16 and not model', smoke)} selected by --filter)" in out
    # MLflow: one parent, one child per config with its params and metrics.
    run_dir = RunDir(results_root / "runs" / "s1")
    assert f"[{len(rows)}/{len(rows)}] " in out  # the progress total: what the workers collected
    meta = run_dir.meta()
    runs = mlflow_runs(meta["mlflow_uri"], "smoke")
    parents = runs[runs["tags.kvbench.role"] == "parent"]
    assert list(parents["run_id"]) == [meta["mlflow_parent"]]
    assert parents.iloc[0]["tags.hardware_profile"] == "cpu" and parents.iloc[0]["status"] == "FINISHED"
    kids = runs[runs["tags.mlflow.parentRunId"] == meta["mlflow_parent"]]
    assert len(kids) == len(rows)
    by_hash = {key_hash(r["key"]): r for r in rows}
    for _, kid in kids.iterrows():
        row = by_hash[kid["tags.kvbench.key_hash"]]
        assert kid["params.page_size"] == "16"
        for name in ("steps", "peak_stranded_slots", "leaked_pages", "output_tokens"):
            assert kid[f"metrics.{lookup(name).mlflow_name}"] == row["metrics"][name]
        assert kid["status"] == "FINISHED" and kid["tags.hardware_profile"] == "cpu"
    assert (results_root / "runs" / "s1" / "plots" / "peak_stranded_slots_heatmap.png").exists()
    assert f"plots: {results_root / 'runs' / 's1' / 'plots'}" in out  # where to look


def _start_sweep(args: list[str], root: Path) -> subprocess.Popen:
    env = dict(os.environ, KVBENCH_RESULTS=str(root))
    return subprocess.Popen([sys.executable, "-m", "harness.cli", *args], env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait_rows(path: Path, n: int, proc: subprocess.Popen, timeout: float = 240) -> int:
    end = time.time() + timeout
    while time.time() < end:
        have = len(path.read_text().splitlines()) if path.exists() else 0
        if have >= n:
            return have
        if proc.poll() is not None:
            pytest.fail(f"sweep ended early: {proc.stdout.read()[-2000:]}")
        time.sleep(0.05)
    pytest.fail("sweep made no progress")


@pytest.mark.slow
def test_sigkill_midway_then_resume_runs_every_config_exactly_once(results_root, suite_file):
    run = results_root / "runs" / "k1"
    proc = _start_sweep(["sweep", str(suite_file), "--run-id", "k1", "-j", "1"], results_root)
    _wait_rows(run / "results.jsonl", 2, proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = len(load_rows(run))
    assert 2 <= before < N_CONFIGS, "the kill must land midway"
    resumed = subprocess.run([sys.executable, "-m", "harness.cli", "sweep", str(suite_file), "--resume", "k1"],
                             env=dict(os.environ, KVBENCH_RESULTS=str(results_root)), capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"resuming, {before} done" in resumed.stdout
    lines = (run / "results.jsonl").read_text().splitlines()
    keys = collections.Counter(__import__("json").loads(l)["key"] for l in lines)
    assert len(keys) == N_CONFIGS and set(keys.values()) == {1}
    meta = RunDir(run).meta()
    per_key = children_per_key(mlflow_runs(meta["mlflow_uri"], "e2e"), "k1")
    assert len(per_key) == N_CONFIGS and set(per_key.values()) == {1}


@pytest.mark.slow
def test_unreachable_mlflow_keeps_every_row_and_sync_uploads_them(results_root, suite_file, cli, capsys):
    dead = "http://127.0.0.1:9"  # discard port: nothing listens
    rc = cli("sweep", str(suite_file), "--run-id", "u1", "-j", "2", "--mlflow-uri", dead)
    io = capsys.readouterr()
    assert rc == 0, io.out + io.err
    assert "kvbench sync u1" in io.err
    run = RunDir(results_root / "runs" / "u1")
    assert len(load_rows(run.path)) == N_CONFIGS and run.meta()["mlflow_parent"] is None
    assert cli("sync", "u1", "--mlflow-uri", dead) == 2  # still dead: one line, and nothing lost
    assert "cannot be reached" in capsys.readouterr().err
    assert len(load_rows(run.path)) == N_CONFIGS
    uri = f"sqlite:///{results_root / 'other.db'}"
    assert cli("sync", "u1", "--mlflow-uri", uri) == 0
    assert f"{N_CONFIGS} uploaded, 0 already there" in capsys.readouterr().out
    assert cli("sync", "u1", "--mlflow-uri", uri) == 0
    assert f"0 uploaded, {N_CONFIGS} already there" in capsys.readouterr().out
    per_key = children_per_key(mlflow_runs(uri, "e2e"), "u1")
    assert len(per_key) == N_CONFIGS and set(per_key.values()) == {1}
    assert run.logged_keys() == {r["key"] for r in load_rows(run.path)} and run.meta()["mlflow_uri"] == uri


def test_one_config_reruns_by_its_test_id(tmp_path):
    test_id = "spec:dflash-bs:16-profile:floor-free-ps:16-window:none"
    node = f"suites/grid/test_grid.py::test_config[{test_id}]"
    env = dict(os.environ)
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", node, "--kvbench-suite", "smoke",
                          "--kvbench-run-dir", str(tmp_path / "one")], cwd=Path(__file__).resolve().parents[3],
                         env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-2000:]
    assert "1 passed" in out.stdout
    rows = load_rows(tmp_path / "one")
    assert [r["test_id"] for r in rows] == [test_id] and rows[0]["verdict"] == "as_expected"
    assert RunDir(tmp_path / "one").meta()["suite"] == "smoke"  # so compare, baseline and sync work on it


def test_pytest_with_an_unknown_suite_is_a_usage_error():
    env = dict(os.environ)
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "suites/grid/test_grid.py",
                          "--kvbench-suite", "nope"], cwd=Path(__file__).resolve().parents[3], env=env,
                         capture_output=True, text=True)
    assert out.returncode == 4  # pytest's usage error
    assert "unknown suite 'nope'" in out.stderr and "Traceback" not in out.stderr + out.stdout


@pytest.mark.slow
def test_a_pytest_run_logs_to_mlflow_as_a_sweep_does(tmp_path, suite_file):
    # pytest alone (--kvbench-mlflow-uri), with xdist workers: a parent per run, a child
    # per config logged by the controller, the parent closed at the end with the plots.
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_TRACKING")}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "suites/grid/test_grid.py",
                          "--kvbench-suite", str(suite_file), "--kvbench-run-dir", str(tmp_path / "p1"),
                          "--kvbench-mlflow-uri", uri, "-k", "seed:1", "-n", "2"], cwd=Path(__file__).resolve().parents[3],
                         env=dict(env, KVBENCH_RESULTS=str(tmp_path)), capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    rows = load_rows(tmp_path / "p1")
    assert len(rows) == N_CONFIGS // 2
    runs = mlflow_runs(uri, "e2e")
    parents = runs[runs["tags.kvbench.role"] == "parent"]
    assert len(parents) == 1 and parents.iloc[0]["status"] == "FINISHED"
    assert children_per_key(runs, "p1") == collections.Counter({key_hash(r["key"]): 1 for r in rows})
    from mlflow import MlflowClient

    plots = {a.path for a in MlflowClient(uri).list_artifacts(parents.iloc[0]["run_id"], "plots")}
    assert "plots/leaked_tokens_heatmap.png" in plots
