"""kvbench sweep --shard I/N: the value, the split (LPT), what it is balanced by."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.cli import main
from harness.core.errors import UsageError
from harness.grid.cost import model_seconds
from harness.grid.shards import measured_seconds, parse_shard, partition, plan, selection
from harness.grid.suites import load_suite

TINY = """
description = "tiny"
[defaults]
workload = "uniform"
num_requests = 4
input_len = 48
output_len = 24
min_len = 8
seed = 3
pool_tokens = 4096
[axes]
algo = [ { spec = "dflash", block_size = 4 }, { spec = "eagle", topk = 1, steps = 2 } ]
page_size = [1, 16]
window = ["none", 32]
"""


@pytest.fixture
def tiny(tmp_path: Path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    return load_suite(path, validate=False)


def test_shards_count_from_one():
    assert (parse_shard("1/4").index, parse_shard("4/4").index, parse_shard("1/1").count) == (1, 4, 1)


@pytest.mark.parametrize("bad", ["0/4", "5/4", "a/b", "1/0", "", "4", "1/4/2", "-1/4", "1.0/4", "2/1001"])
def test_bad_shard_is_refused(bad):
    with pytest.raises(UsageError, match=r"--shard takes I/N, shard I of N counted from 1 \(1/4 \.\. 4/4\)"):
        parse_shard(bad)


@pytest.mark.parametrize("bad", ["0/4", "5/4", "a/b", "1/0"])
def test_bad_shard_is_one_line_exit_2(bad, capsys):
    assert main(["sweep", "smoke", "--shard", bad, "--no-mlflow"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--shard takes I/N" in err and repr(bad) in err


def test_a_shard_needs_the_nights_run_id(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("KVBENCH_RESULTS", str(tmp_path))
    assert main(["sweep", "smoke", "--shard", "1/2", "--no-mlflow"]) == 2
    assert "--shard 1/2 needs --run-id" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()  # refused before anything was made


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=1e4, allow_nan=False), max_size=60), st.integers(1, 12))
def test_partition_puts_each_config_in_exactly_one_shard(costs, count):
    ids = [f"c{i}" for i in range(len(costs))]
    expected = dict(zip(ids, costs))
    shards = partition(expected, count, ids)
    assert len(shards) == count
    assert sorted(c for s in shards for c in s) == sorted(ids)  # each once, none lost
    assert all(s == sorted(s, key=ids.index) for s in shards)  # in suite order
    assert partition(dict(reversed(expected.items())), count, ids) == shards  # deterministic
    loads = [sum(expected[c] for c in s) for s in shards]
    # Greedy onto the least loaded: the fullest shard was least loaded before its last config.
    assert max(loads) - min(loads) <= max(costs, default=0.0) + 1e-6


def test_lpt_worked_example():
    # 7 -> A; 5 -> B; 4 -> B (5 < 7: B 9); 3 -> A (7 < 9: A 10); 3 -> B (9 < 10: B 12).
    shards = partition({"a": 7, "b": 5, "c": 4, "d": 3, "e": 3}, 2, list("abcde"))
    assert shards == [["a", "d"], ["b", "c", "e"]]


def test_invariants_shards_are_within_20_percent_of_their_mean(tmp_path):
    """No night yet: the cost model alone splits the 461-config suite; N=4."""
    suite = load_suite("invariants", validate=False)
    p = plan(suite, 4, [tmp_path], "cpu")
    loads = p.loads()
    mean = sum(loads) / 4
    assert sorted(c for s in p.shards for c in s) == sorted(gc.id for gc in suite.configs)
    assert max(abs(x - mean) for x in loads) <= 0.2 * mean, loads
    assert "cost model" in p.source


def _night(root: Path, name: str, suite: str, took: dict[str, float], *, created: float, shard=None,
           profile: str = "cpu") -> Path:
    d = root / name
    d.mkdir(parents=True)
    meta = {"suite": suite, "created": created, "hardware": {"profile": profile}}
    if shard:
        meta["shard"] = shard
    (d / "meta.json").write_text(json.dumps(meta))
    rows = [{"key": k, "status": "ok", "started_at": 100.0, "finished_at": 100.0 + s} for k, s in took.items()]
    (d / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


def test_the_last_nights_durations_lead_and_scale_the_model(tiny, tmp_path):
    keys = {gc.id: gc.spec.key for gc in tiny.configs}
    first, second = tiny.configs[0].id, tiny.configs[1].id
    model = {gc.id: model_seconds(gc.config, tiny.repeat) for gc in tiny.configs}
    _night(tmp_path, "old", "tiny", {keys[first]: 1.0, keys[second]: 99.0}, created=1.0)
    _night(tmp_path, "new", "tiny", {keys[first]: 50.0}, created=2.0)  # the newest measure of first wins
    _night(tmp_path, "shard", "tiny", {keys[first]: 7.0}, created=3.0, shard={"index": 1, "count": 2})
    _night(tmp_path, "gpu", "tiny", {keys[first]: 9.0}, created=4.0, profile="h100")
    assert measured_seconds("tiny", "cpu", [tmp_path]) == {keys[first]: 50.0, keys[second]: 99.0}
    p = plan(tiny, 2, [tmp_path], "cpu")
    assert p.expected[first] == 50.0 and p.expected[second] == 99.0
    scale = (50.0 + 99.0) / (model[first] + model[second])
    third = tiny.configs[2].id
    assert p.expected[third] == pytest.approx(model[third] * scale)
    assert "2 of 8 configs" in p.source
    assert p.digest != plan(tiny, 2, [tmp_path / "none"], "cpu").digest  # other nights, another plan


def test_a_filtered_suite_is_split_over_what_the_filter_selects(tiny, tmp_path):
    p = plan(tiny, 2, [tmp_path], "cpu", "eagle")
    assert sorted(c for s in p.shards for c in s) == sorted(gc.id for gc in tiny.configs if "eagle" in gc.id)


def test_a_shard_misses_only_its_own_configs():
    keep = selection({"shard": {"index": 1, "count": 2, "configs": ["a", "b"]}, "filter": None})
    assert keep("a") and not keep("c")
    assert selection({"filter": None}) is None


def test_a_resumed_shard_keeps_its_share(tiny, tmp_path):
    """--resume of a shard takes its share from meta.json; another --shard is refused."""
    from harness.grid.sweep import SweepError, check_resumable
    from harness.store.results import RunDir

    run = RunDir(tmp_path)
    run.write_meta({"suite": "tiny", "suite_hash": tiny.digest, "shard": {"index": 2, "count": 3, "configs": []}})
    check_resumable(run, tiny, None)
    check_resumable(run, tiny, parse_shard("2/3"))
    with pytest.raises(SweepError, match=r"is shard 2/3, not --shard 1/3; leave --shard out"):
        check_resumable(run, tiny, parse_shard("1/3"))
    run.write_meta({"suite": "tiny", "suite_hash": tiny.digest})
    with pytest.raises(SweepError, match="is not a shard, not --shard 1/3"):
        check_resumable(run, tiny, parse_shard("1/3"))
