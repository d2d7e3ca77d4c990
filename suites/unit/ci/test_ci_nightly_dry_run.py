"""The nightly job, locally on CPU and without GitHub: sweep, compare, triage.

The same commands nightly-gpu.yml runs, on a slice of the smoke suite (page size 64
without SWA: both algorithms, every profile, the dedup free and shared prompts): a real
sweep, its comparison with a baseline, and triage over two nights. A slice, not the
whole suite: what is asserted here is the chain of commands, and every smoke config
already runs, judged by its expect rules, as a test of suites/grid in the same test
command. The baseline is blessed from the sweep itself and then one counter of one
config is lowered, so the night (and a copy standing for the night before) regress on
exactly that figure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.grid.suites import load_suite
from harness.grid.sweep import check_filter

REPO = Path(__file__).resolve().parents[3]
KVBENCH = Path(sys.executable).parent / "kvbench"
SLICE = "ps:64 and window:none and not model"  # a slice of the smoke suite


def kvbench(*args, env):
    return subprocess.run([KVBENCH, *map(str, args)], capture_output=True, text=True, cwd=REPO, env=env,
                          timeout=900)


@pytest.mark.slow
def test_nightly_job_dry_run(tmp_path):
    results = tmp_path / "results"
    env = dict(os.environ, KVBENCH_RESULTS=str(results))
    env.pop("MLFLOW_TRACKING_URI", None)
    env.pop("GITHUB_TOKEN", None)  # triage must not need GitHub without --github

    out = kvbench("sweep", "smoke", "--filter", SLICE, "--run-id", "nightly-cpu-2", "--no-mlflow", "-j", "1", env=env)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    night = results / "runs" / "nightly-cpu-2"
    rows = [json.loads(line) for line in (night / "results.jsonl").read_text().splitlines() if line.strip()]
    assert len(rows) == check_filter(SLICE, load_suite("smoke")) and all(r["status"] != "failed" for r in rows)

    baseline = tmp_path / "cpu.json"
    assert kvbench("baseline", night, "--out", baseline, env=env).returncode == 0
    assert kvbench("compare", night, "--baseline", baseline, env=env).returncode == 0  # a night equals its own baseline

    data = json.loads(baseline.read_text())
    key = next(k for k, v in data["configs"].items() if v["counters"].get("peak_pages_held", 0) > 1)
    data["configs"][key]["counters"]["peak_pages_held"] -= 1
    baseline.write_text(json.dumps(data))
    out = kvbench("compare", night, "--baseline", baseline, "--format", "markdown", env=env)
    assert out.returncode == 1 and "peak_pages_held" in out.stdout and "regression" in out.stdout

    history = tmp_path / "nights"
    history.mkdir()
    shutil.copytree(night, history / "000000000001-nightly-cpu-1")  # the night before, the same figures
    shutil.copytree(night, history / "000000000002-nightly-cpu-2")
    out = kvbench("ci", "triage", "--history", history, "--baseline", baseline, "--runner", "cpu", env=env)
    assert out.returncode == 0, out.stderr
    assert "triage: 1 tracked, 0 one-night, 0 recovered, 0 improved, 0 changed over 2 night(s)" in out.stdout
    assert f"kvbench regression: {key} (cpu)" in out.stdout and "| `peak_pages_held` |" in out.stdout

    # Only the newest night regressed: a blip, nothing filed.
    older = history / "000000000001-nightly-cpu-1" / "results.jsonl"
    lines = [json.loads(line) for line in older.read_text().splitlines() if line.strip()]
    for row in lines:
        if row["key"] == key:
            row["metrics"]["peak_pages_held"] -= 1  # last night matched the baseline
    older.write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    out = kvbench("ci", "triage", "--history", history, "--baseline", baseline, env=env)
    assert out.returncode == 0 and "triage: 0 tracked, 1 one-night" in out.stdout
