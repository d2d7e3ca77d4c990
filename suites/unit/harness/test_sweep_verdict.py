"""The sweep judges itself (harness/grid/verdict.py): against the baseline and the run before,
with a planted reservation change (DFLASH reserving three blocks, not two) in the workers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.store.results import RunDir
from harness.view.mlflow_log import client, experiment_name

SUITE = """
name = "judged"
[defaults]
spec = "dflash"
block_size = 16
num_requests = 6
input_len = 96
output_len = 48
min_len = 40
seed = 7
pool_tokens = 8192
[axes]
page_size = [1, 16, 64]
"""

# Imported by every Python process that starts with this directory on its path (the
# sweep's xdist workers): the reservation change of the finding, planted in the engine.
PLANT = """
import mini_engine.memory.sizing as sizing
sizing.dflash_reserve = lambda block_size: 3 * block_size
"""


def parent_of(uri: str, run_id: str):
    cl = client(uri)
    exp = cl.get_experiment_by_name(experiment_name("judged"))
    runs = cl.search_runs([exp.experiment_id], filter_string=f"tags.`kvbench.run` = '{run_id}' "
                                                            "and tags.`kvbench.role` = 'parent'")
    assert len(runs) == 1
    return cl, runs[0]


@pytest.mark.slow
def test_a_planted_reservation_change_turns_the_night_red_and_its_fix_is_improved(
        results_root, cli, capsys, tmp_path, monkeypatch):
    suite = tmp_path / "judged.toml"
    suite.write_text(SUITE)
    uri = f"sqlite:///{results_root / 'mlflow.db'}"

    assert cli("sweep", suite, "--run-id", "n1", "-j", "1") == 0
    assert "nothing to judge against" in capsys.readouterr().out
    assert "kvbench.compare" not in parent_of(uri, "n1")[1].data.tags
    assert cli("baseline", "n1") == 0
    capsys.readouterr()

    plant = tmp_path / "plant"
    plant.mkdir()
    (plant / "sitecustomize.py").write_text(PLANT)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(plant), os.environ.get("PYTHONPATH", "")]))
    rc = cli("sweep", suite, "--run-id", "n2", "-j", "1", "--fail-on-regression")
    out = capsys.readouterr().out
    assert rc == 1, out  # every config still "ok": only the comparison sees it
    assert "compare against baseline cpu.json: regressed" in out
    assert "compare against previous run n1: regressed" in out
    assert "peak_reserved_slots regressed" in out and "--fail-on-regression: the run regressed" in out
    # The baseline is n1 itself: the same moves against both, so the roll-up is printed once.
    assert out.count("peak_reserved_slots regressed") == 1 and "the same moves as against baseline cpu.json" in out
    cl, parent = parent_of(uri, "n2")
    assert parent.data.tags["kvbench.compare"] == "regressed" and parent.info.status == "FAILED"
    # The red run's page says why, first: what regressed, by how much, in which configs.
    note = parent.data.tags["mlflow.note.content"]
    assert note.startswith("**Verdict: regressed.**") and "`peak_reserved_slots` regressed +" in note
    assert "in 3 configs" in note and "Sweep n2 of suite judged" in note
    moved = parent.data.tags["kvbench.moved"]  # on the first screen: the worst roll-up line
    assert " regressed +" in moved and moved.endswith("in 3 configs: every config"), moved
    names = {a.path for a in cl.list_artifacts(parent.info.run_id, "compare")}
    assert names == {"compare/compare.md", "compare/report.html"}
    md = (results_root / "runs" / "n2" / "compare.md").read_text()
    assert "Verdict: **regressed**" in md and "```text" in md and "peak_reserved_slots" in md
    html = (results_root / "runs" / "n2" / "report.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "peak_reserved_slots regressed" in html

    monkeypatch.undo()  # the fix: workers reserve two blocks again
    monkeypatch.setenv("KVBENCH_RESULTS", str(results_root))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    rc = cli("sweep", suite, "--run-id", "n3", "-j", "1", "--fail-on-regression")
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "compare against baseline cpu.json: clean" in out  # back to what was blessed
    assert "compare against previous run n2: improved" in out and "peak_reserved_slots improved" in out
    assert parent_of(uri, "n3")[1].data.tags["kvbench.compare"] == "improved"
    assert parent_of(uri, "n3")[1].info.status == "FINISHED"


def test_earlier_runs_are_the_suite_and_profiles_newest_first(tmp_path):
    from harness.grid.verdict import earlier_runs

    def night(name, suite, created, profile="cpu"):
        d = RunDir(tmp_path / name)
        d.path.mkdir()
        d.write_meta({"suite": suite, "created": created, "hardware": {"profile": profile}})
        (d.path / "results.jsonl").write_text("")
        return d

    night("a", "s", 1.0), night("b", "s", 2.0), night("other", "t", 2.5), night("gpu", "s", 2.6, "h100")
    me = night("c", "s", 3.0)
    night("later", "s", 4.0)
    assert [r.run_id for r in earlier_runs(me, me.meta(), [tmp_path])] == ["b", "a"]
    assert earlier_runs(me, me.meta(), [tmp_path / "absent"]) == []


def test_nights_must_be_a_directory(cli, capsys, results_root):
    assert cli("sweep", "smoke", "--nights", str(Path("/nonexistent-dir"))) == 2
    assert "--nights '/nonexistent-dir' is not a directory" in capsys.readouterr().err
