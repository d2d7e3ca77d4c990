"""A night swept in three shards and merged reads as the same suite swept on one machine.

Real sweeps of a tiny suite through the CLI: three shards (each its own results root,
as three machines), `kvbench merge`, then compare against the one-machine sweep (no
counter may change), and history, report and ci triage over the merged night.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

KVBENCH = Path(sys.executable).parent / "kvbench"
from test_shards import TINY  # the unit tests' suite, here split and merged for real


def kvbench(*args, root: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, KVBENCH_RESULTS=str(root))
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run([KVBENCH, *map(str, args)], capture_output=True, text=True, env=env, timeout=600)


@pytest.fixture(scope="module")
def night(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shards")
    suite = tmp / "tiny.toml"
    suite.write_text(TINY)
    one = kvbench("sweep", suite, "--run-id", "one", "--no-mlflow", "-j", "1", root=tmp / "one")
    assert one.returncode == 0, one.stdout[-2000:] + one.stderr[-2000:]
    shards = []
    for i in (1, 2, 3):
        out = kvbench("sweep", suite, "--shard", f"{i}/3", "--run-id", "night", "--no-mlflow", "-j", "1",
                      root=tmp / f"machine{i}")
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        assert f"shard {i}/3" in out.stdout
        shards.append(tmp / f"machine{i}" / "runs" / "night")
    merged = kvbench("merge", *shards, "--run-id", "night", root=tmp / "merged")
    assert merged.returncode == 0, merged.stderr
    return tmp, suite, shards


@pytest.mark.slow
def test_merged_night_equals_one_machine(night):
    tmp, _, shards = night
    per_shard = [len((s / "results.jsonl").read_text().splitlines()) for s in shards]
    assert sum(per_shard) == 8 and all(per_shard)
    out = kvbench("compare", tmp / "one" / "runs" / "one", tmp / "merged" / "runs" / "night", root=tmp / "merged")
    assert out.returncode == 0, out.stdout
    assert "8 configs compared: 0 regressions, 0 improvements, 0 changed, 0 new, 0 missing" in out.stdout


@pytest.mark.slow
def test_a_shard_alone_misses_nothing(night):
    tmp, _, shards = night
    out = kvbench("compare", tmp / "one" / "runs" / "one", shards[1], root=tmp / "merged")
    assert out.returncode == 0 and "0 missing" in out.stdout, out.stdout


@pytest.mark.slow
def test_history_report_and_triage_read_the_merged_night_as_one(night):
    tmp, _, shards = night
    nights = tmp / "nights"
    nights.mkdir()
    shutil.copytree(tmp / "one" / "runs" / "one", nights / "000000000001-cpu")
    shutil.copytree(tmp / "merged" / "runs" / "night", nights / "000000000002-cpu")
    shutil.copytree(shards[0], nights / "000000000002-cpu-shard1")  # a stray shard is not a third night
    out = kvbench("history", "tiny", "--nights", nights, root=tmp / "merged")
    assert out.returncode == 0, out.stderr
    assert "2 nights, oldest first" in out.stdout and "0 figures moved over 2 nights" in out.stdout
    report = kvbench("report", nights / "000000000001-cpu", nights / "000000000002-cpu", "--out", tmp / "r.html",
                     root=tmp / "merged")
    assert report.returncode == 0, report.stderr
    assert "tiny sharded" not in report.stderr and (tmp / "r.html").stat().st_size > 0
    base = tmp / "cpu.json"
    assert kvbench("baseline", tmp / "one" / "runs" / "one", "--out", base, root=tmp / "merged").returncode == 0
    triage = kvbench("ci", "triage", "--history", nights, "--baseline", base, "--runner", "cpu", root=tmp / "merged")
    assert triage.returncode == 0, triage.stderr
    assert "over 2 night(s)" in triage.stdout and "triage: 0 tracked" in triage.stdout


@pytest.mark.slow
def test_shards_of_different_commits_are_refused(night, tmp_path):
    tmp, _, shards = night
    other = tmp_path / "other" / "night"
    shutil.copytree(shards[2], other)
    meta = json.loads((other / "meta.json").read_text())
    meta["git_commit"] = "0" * 40
    (other / "meta.json").write_text(json.dumps(meta))
    out = kvbench("merge", shards[0], shards[1], other, "--run-id", "n2", root=tmp_path / "res")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "differ in commit" in out.stderr
