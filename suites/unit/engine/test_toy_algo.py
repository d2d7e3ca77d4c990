"""A new algorithm is one file: toy_algo.py, loaded through KVBENCH_PLUGINS, runs
through `kvbench run`, a suite grid (`kvbench sweep`) and `kvbench compare` with no
other module naming it. Subprocesses, as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mini_engine import algos
from mini_engine.algos import Algorithm
from mini_engine.config.engine_config import EngineConfig
from mini_engine.errors import ConfigError
from mini_engine.config.option import Option

ROOT = Path(__file__).resolve().parents[3]
PLUGIN = "suites.unit.engine.toy_algo"

GRID = """
name = "toy-grid"
[defaults]
num_requests = 6
input_len = 48
output_len = 24
min_len = 8
pool_tokens = 8192
[axes]
spec = [{ spec = "toy", chain = [2, 5] }, { spec = "dflash", block_size = 4 }]
page_size = [1, 16]
"""


def kvbench(*args: str, results: Path, plugins: str | None = PLUGIN) -> subprocess.CompletedProcess:
    env = {**os.environ, "KVBENCH_RESULTS": str(results),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("KVBENCH_PLUGINS", None)
    if plugins:
        env["KVBENCH_PLUGINS"] = plugins
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)


def test_kvbench_run_takes_the_toy_its_flag_and_its_reserve(tmp_path: Path):
    out, trace = tmp_path / "row.json", tmp_path / "t.jsonl"
    p = kvbench("run", "--spec", "toy", "--chain", "4", "--page-size", "16", "--num-requests", "4",
                "--input-len", "40", "--output-len", "20", "--min-len", "8", "--json", str(out), "--trace", str(trace),
                results=tmp_path)
    assert p.returncode == 0, p.stderr
    row = json.loads(out.read_text())
    assert row["key"].startswith("spec=toy,ps=16,ch=4,profile=sglang-0.5.23,") and row["config"]["chain"] == 4
    assert row["metrics"]["leaked_pages"] == 0 and row["metrics"]["finished_requests"] == 4
    assert 1 <= row["metrics"]["tau"] <= 5  # at most chain + 1 tokens a verify
    prepares = [r for r in map(json.loads, trace.read_text().splitlines()[1:]) if r["op"] == "prepare"]
    assert prepares and {(r["algo"], r["reserve"]) for r in prepares} == {("toy", 5)}
    # Unaligned under 0.5.23 (no profile names the toy's writer): nxt = committed + reserve exactly.
    assert all(q["nxt"] == max(q["cur"], q["committed"] + 5) for r in prepares for q in r["reqs"])


@pytest.mark.parametrize("flags", [("--align", "toy"), ("--profile", "host-aligned")])
def test_a_profile_can_page_align_the_toy(tmp_path: Path, flags):
    # The profiles' writers come from the registry: the toy declares its writer (its
    # name), so --align names it and host-aligned (every writer) covers it.
    out, trace = tmp_path / "row.json", tmp_path / "t.jsonl"
    p = kvbench("run", "--spec", "toy", "--chain", "4", "--page-size", "16", "--num-requests", "4",
                "--input-len", "40", "--output-len", "20", "--min-len", "8", "--audit", "record", *flags,
                "--json", str(out), "--trace", str(trace), results=tmp_path)
    assert p.returncode == 0, p.stderr
    row = json.loads(out.read_text())
    assert row["status"] == "ok" and sum(row["violations"].values()) == 0
    assert row["metrics"]["peak_stranded_slots_spec"] == 0
    prepares = [r for r in map(json.loads, trace.read_text().splitlines()[1:]) if r["op"] == "prepare"]
    assert prepares and all(r["aligned"] and r["algo"] == "toy" for r in prepares)
    assert all(q["nxt"] == max(q["cur"], -(-(q["committed"] + 5) // 16) * 16) for r in prepares for q in r["reqs"])


def test_toy_flag_is_refused_without_the_plugin_and_for_another_algorithm(tmp_path: Path):
    p = kvbench("run", "--spec", "toy", results=tmp_path, plugins=None)
    assert p.returncode == 2 and "invalid choice: 'toy'" in p.stderr
    p = kvbench("run", "--spec", "dflash", "--chain", "2", results=tmp_path)
    assert p.returncode == 2 and p.stderr.strip() == (
        "kvbench: error: chain applies to spec=toy only (spec is 'dflash'); drop chain or set spec=toy")
    p = kvbench("run", results=tmp_path, plugins="suites.unit.engine.no_such_plugin")
    assert p.returncode == 2 and "KVBENCH_PLUGINS: cannot import 'suites.unit.engine.no_such_plugin'" in p.stderr


def test_toy_runs_through_a_suite_grid_and_compare(tmp_path: Path):
    grid = tmp_path / "toy-grid.toml"
    grid.write_text(GRID)
    p = kvbench("sweep", str(grid), "--no-mlflow", "--run-id", "toy", results=tmp_path)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "runs" / "toy" / "results.jsonl").read_text().splitlines()]
    assert sorted(r["test_id"] for r in rows) == sorted(
        f"spec:{s}-{opt}-ps:{ps}" for s, opt in (("toy", "ch:2"), ("toy", "ch:5"), ("dflash", "bs:4"))
        for ps in (1, 16))
    assert all(r["status"] == "ok" and r["verdict"] == "ok" for r in rows)
    toy = {r["key"]: r for r in rows if r["config"]["spec"] == "toy"}
    assert "spec=toy,ps=16,ch=5,profile=sglang-0.5.23,workload=uniform,n=6,in=48,min_len=8,out=24,pool=8192" in toy

    assert kvbench("baseline", "toy", results=tmp_path).returncode == 0
    base = tmp_path / "baselines" / "cpu.json"
    p = kvbench("compare", "toy", "--baseline", str(base), results=tmp_path)
    assert p.returncode == 0 and "0 regressions" in p.stdout, p.stdout + p.stderr

    # The gate sees the toy's counters: a baseline that reserved less makes now's figure a
    # regression (fewer reserved slots is better).
    data = json.loads(base.read_text())
    key = next(k for k in data["configs"] if k.startswith("spec=toy,ps=16,ch=5"))
    data["configs"][key]["counters"]["peak_reserved_slots"] -= 1
    base.write_text(json.dumps(data))
    p = kvbench("compare", "toy", "--baseline", str(base), results=tmp_path)
    assert p.returncode == 1 and "peak_reserved_slots" in p.stdout and "1 regression" in p.stdout, p.stdout


def test_a_late_registration_with_new_options_is_refused_in_one_line():
    class Late(Algorithm):
        name = "late"
        options = (Option("late_width", int, None, "width", minimum=1),)

    assert "late_width" not in EngineConfig.option_names()  # EngineConfig is built: no field for it
    with pytest.raises(ConfigError, match="declares new options .late_width. after mini_engine.config.engine_config was imported; "
                                          "load it through KVBENCH_PLUGINS"):
        algos.register(Late())
    assert "late" not in algos.ALGORITHMS
    with pytest.raises(ConfigError, match="already registered"):
        algos.register(algos.get("dflash"))
