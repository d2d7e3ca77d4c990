"""A grid config on the reference engine (engine = "sglang", kvbench sweep --engine sglang).

The row carries engine=sglang in its key (so a baseline of the mini engine never meets it)
and its config, SGLang's release beside it, and on a config where the two engines agree on
every step its counters are the mini engine's. The configs the reference cannot run are
left out of a sweep, each with its reason. One SGLang import for the module.
"""

from __future__ import annotations

import pytest

from harness.grid.engines import skipped_line, unsupported, with_engine
from harness.grid.execute import GridSession
from harness.grid.suites import load_suite
from harness.store.results import RunDir, read_jsonl

# Equal on every step on both engines (test_reference_engine.py: plain decoding, overlap off).
SUITE = """description = "two configs: one the reference runs, one it does not"
[defaults]
workload = "uniform"
num_requests = 8
input_len = 64
min_len = 16
output_len = 16
pool_tokens = 8192
overlap = false
[axes]
profile = ["sglang-0.5.23", "host-aligned"]
"""
COUNTERS = ("steps", "prefill_steps", "decode_steps", "finished_requests", "output_tokens", "peak_pages_held",
            "peak_pages_used", "peak_running", "retractions", "prefix_hit_tokens", "tree_pages", "leaked_pages")


@pytest.fixture
def suite(tmp_path):
    path = tmp_path / "two.toml"
    path.write_text(SUITE)
    return load_suite(path)


def test_unsupported_configs_are_left_out_with_their_reason(suite):
    on = with_engine(suite, "sglang")
    skipped = unsupported(on)
    assert list(skipped) == [c.id for c in on.configs if "host-aligned" in c.id]
    assert skipped_line(skipped, 2) == ("engine sglang: 1 of 2 configs not run, the reference does not support them: "
                                        "1 for --profile host-aligned (the reference is SGLang 0.5.23's own loop: "
                                        "--profile sglang-0.5.23)")
    assert unsupported(suite) == {}  # the mini engine runs every config


def test_reference_row_keyed_apart_and_equal_to_the_mini_engines(reference, suite, tmp_path):
    gc_mini = next(c for c in suite.configs if "sglang-0.5.23" in c.id)
    gc_ref = next(c for c in with_engine(suite, "sglang").configs if c.id == gc_mini.id)
    for name in ("ref", "mini"):
        (tmp_path / name).mkdir()
    ref = GridSession(suite, RunDir(tmp_path / "ref")).run(gc_ref)
    mini = GridSession(suite, RunDir(tmp_path / "mini")).run(gc_mini)
    assert ref["status"] == "ok" and ref["verdict"] == mini["verdict"] == "ok", ref.get("reasons")
    assert ref["engine"] == ref["config"]["engine"] == "sglang" and ref["sglang_version"] == reference.version
    assert "engine=sglang" in ref["key"].split(",")  # never the mini engine's baseline row
    assert ref["key"].replace("engine=sglang,", "") == mini["key"]
    assert "engine" not in mini["config"]  # the mini engine's rows and keys as before the option
    assert {m: ref["metrics"][m] for m in COUNTERS} == {m: mini["metrics"][m] for m in COUNTERS}
    assert ref["series"]["held"] == mini["series"]["held"]
    assert [r["key"] for r in read_jsonl(RunDir(tmp_path / "ref").results)] == [ref["key"]]


def test_a_rule_on_a_figure_the_reference_does_not_measure_is_a_note_not_a_failure():
    from harness.judge.expect import Expectation, judge

    exp = Expectation(rules=["r"], status=["ok"], metrics={"peak_stranded_slots_spec": 0}, violations={})
    row = {"status": "ok", "metrics": {"steps": 3}, "violations": {}}
    assert judge({**row, "engine": "sglang"}, exp) == (
        "ok", ["not judged: metric peak_stranded_slots_spec (engine sglang does not measure it)"])
    assert judge(row, exp) == ("unexpected", ["metric peak_stranded_slots_spec missing from the row"])


def test_a_sweep_the_reference_runs_nothing_of_is_refused_before_a_run_dir(tmp_path, monkeypatch, capsys):
    from harness.cli import main

    monkeypatch.setenv("KVBENCH_RESULTS", str(tmp_path / "res"))
    path = tmp_path / "what_ifs.toml"
    path.write_text(SUITE.replace('["sglang-0.5.23", "host-aligned"]', '["host-aligned", "floor-free"]'))
    assert main(["sweep", str(path), "--engine", "sglang", "--no-mlflow"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "engine sglang: 2 of 2 configs not run" in err[0] and "nothing is left to run" in err[0]
    assert not (tmp_path / "res" / "runs").exists() or not any((tmp_path / "res" / "runs").iterdir())
