"""kvbench merge: the shards of one night into one run, every refusal one line, exit 2."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness.cli import main
from harness.core.errors import HarnessError, UsageError
from harness.judge.history import find_nights
from harness.store.merge import merge
from harness.store.results import load_rows

PLAN = [["a", "b"], ["c"], ["d", "e"]]


def _shard(root: Path, index: int, *, count: int = 3, plan=PLAN, night: str = "night-7", rows=None, **meta) -> Path:
    d = root / f"shard{index}" / night
    d.mkdir(parents=True)
    ids = plan[index - 1]
    base = {"suite": "tiny", "suite_hash": "h", "git_commit": "c0ffee", "hardware": {"profile": "cpu"},
            "filter": None, "repeat": 1, "created": 1000.0 + index, "wall_s": 10.0 * index, "jobs": 1,
            "mlflow_uri": None, "mlflow_parent": None,
            "shard": {"index": index, "count": count, "plan": "p1", "night": night, "configs": ids}}
    base.update(meta)
    (d / "meta.json").write_text(json.dumps(base))
    rows = rows if rows is not None else [{"key": f"k-{i}", "test_id": i, "suite": "tiny", "status": "ok",
                                           "metrics": {"peak_pages_held": 3}, "run_id": night} for i in ids]
    (d / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "pytest.log").write_text(f"log of shard {index}\n")
    return d


@pytest.fixture
def shards(tmp_path):
    return [_shard(tmp_path, i) for i in (1, 2, 3)]


def test_merged_night_holds_every_row_once(shards, tmp_path):
    run_dir, notes = merge(list(reversed(shards)), "night-7", tmp_path / "res")
    rows = load_rows(run_dir.path)
    assert [r["test_id"] for r in rows] == ["a", "b", "c", "d", "e"] and notes == []
    meta = run_dir.meta()
    assert "shard" not in meta and meta["merged"]["count"] == 3 and meta["created"] == 1001.0
    assert meta["wall_s"] == 30.0  # side by side: the longest shard is the night's wall time
    assert [s["index"] for s in meta["merged"]["shards"]] == [1, 2, 3]
    log = (run_dir.path / "pytest.log").read_text()
    assert log.index("log of shard 1") < log.index("log of shard 3")
    assert [n.name for n in find_nights(tmp_path / "res")] == ["night-7"]  # one night, not three


def test_a_merged_night_under_another_id_names_it_in_its_rows(shards, tmp_path):
    run_dir, _ = merge(shards, "merged", tmp_path / "res")
    assert {r["run_id"] for r in load_rows(run_dir.path)} == {"merged"}


def test_an_unmerged_shard_is_no_night(shards, tmp_path):
    assert find_nights(shards[0].parent) == []


def test_a_shard_short_of_its_share_is_merged_with_a_note(tmp_path):
    dirs = [_shard(tmp_path, 1), _shard(tmp_path, 2, rows=[]), _shard(tmp_path, 3)]
    _, notes = merge(dirs, "n", tmp_path / "res")
    assert notes == ["shard 2/3 measured 0 of its 1 configs: the others count as missing"]


REFUSALS = {
    "missing": (lambda t: [_shard(t, 1), _shard(t, 3)], "shard 2/3 missing: give all 3 shards of night night-7"),
    "twice": (lambda t: [_shard(t, 1), _shard(t, 2), _shard(t, 3), _shard(t / "again", 2)], "shard 2/3 given twice"),
    "commit": (lambda t: [_shard(t, 1), _shard(t, 2, git_commit="beef"), _shard(t, 3)],
               "differ in commit ('c0ffee' vs 'beef'): not shards of one night"),
    "suite": (lambda t: [_shard(t, 1), _shard(t, 2, suite="smoke"), _shard(t, 3)], "differ in suite"),
    "profile": (lambda t: [_shard(t, 1), _shard(t, 2, hardware={"profile": "h100"}), _shard(t, 3)],
                "differ in hardware profile"),
    "count": (lambda t: [_shard(t, 1), _shard(t, 2, count=4, plan=PLAN + [[]]), _shard(t, 3)],
              "differ in shard count"),
    "night": (lambda t: [_shard(t, 1), _shard(t, 2, night="night-8"), _shard(t, 3)], "differ in night (--run-id)"),
    "overlap": (lambda t: [_shard(t, 1), _shard(t, 2, plan=[["a", "b"], ["c", "a"], []]), _shard(t, 3)],
                "config 'a' is in shards 1/3 and 2/3: overlapping shards"),
    "not its share": (lambda t: [_shard(t, 1, rows=[{"key": "k-c", "test_id": "c"}]), _shard(t, 2), _shard(t, 3)],
                      "holds config 'c', which its plan gave to another shard"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_shards_that_are_not_one_night_are_refused(case, tmp_path, capsys, monkeypatch):
    make, message = REFUSALS[case]
    dirs = make(tmp_path)
    monkeypatch.setenv("KVBENCH_RESULTS", str(tmp_path / "res"))
    assert main(["merge", *map(str, dirs), "--run-id", "night-7"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "res" / "runs" / "night-7").exists()  # nothing written


def test_a_run_that_is_not_a_shard_is_refused(tmp_path):
    d = _shard(tmp_path, 1)
    meta = json.loads((d / "meta.json").read_text())
    del meta["shard"]
    (d / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(UsageError, match="is not a shard"):
        merge([d], "n", tmp_path / "res")


@pytest.mark.parametrize("shard", [{"index": 4, "count": 3}, {"index": 0, "count": 3}, {"index": True, "count": 3},
                                   {"index": 1, "count": 3, "configs": [["a"], "b"]}])
def test_a_shard_block_that_cannot_be_one_is_refused_in_one_line(tmp_path, shard):
    """An index past the count, or a share holding no config ids (a list ended in a TypeError
    traceback when the share was made a set)."""
    d = _shard(tmp_path, 1)
    meta = json.loads((d / "meta.json").read_text())
    meta["shard"].update(shard)
    (d / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(UsageError, match="is not a shard"):
        merge([d], "n", tmp_path / "res")


def test_merged_night_plans_every_shards_share(shards, tmp_path):
    run_dir, _ = merge(shards, "night-7", tmp_path / "res")
    assert run_dir.meta()["planned"] == 5  # sync's check that every config the night owed ran


def test_links_in_a_shard_are_not_followed(tmp_path):
    secret = tmp_path / "secret.jsonl"
    secret.write_text('{"key": "k-a", "test_id": "a"}\n')
    dirs = [_shard(tmp_path, i) for i in (1, 2, 3)]
    (dirs[0] / "results.jsonl").unlink()
    os.symlink(secret, dirs[0] / "results.jsonl")
    with pytest.raises(HarnessError, match="a symbolic link, not a regular file; kvbench reads only regular files"):
        merge(dirs, "n", tmp_path / "res")
    (dirs[0] / "results.jsonl").unlink()
    (dirs[0] / "results.jsonl").write_text(secret.read_text())
    link = tmp_path / "linked"
    os.symlink(dirs[1], link)
    with pytest.raises(UsageError, match="not a run directory"):
        merge([dirs[0], link, dirs[2]], "n", tmp_path / "res")


def test_an_existing_run_is_not_overwritten(shards, tmp_path):
    merge(shards, "n", tmp_path / "res")
    with pytest.raises(UsageError, match="already exists"):
        merge(shards, "n", tmp_path / "res")
