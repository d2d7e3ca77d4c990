"""A run's config is parsed once where it enters: `kvbench run`, a suite's load.

The counter is RunSpec.parse itself, wrapped (the ``parses`` fixture, suites/conftest.py): every layer below the boundary takes the
spec, so a second parse anywhere (the bounds, the capacity table, the runner, a sweep's
warmup and repeats, its rules, its result key) shows as one more call. A sweep's runs are
in pytest workers that load the suite unvalidated: there a config's first run parses it
and its repeats reuse the spec.
"""

from __future__ import annotations

import pytest

from harness.core.errors import UsageError
from harness.core.run_spec import RunSpec
from harness.grid.execute import GridSession
from harness.grid.suites import load_suite
from harness.store.results import RunDir

SMALL = ["--workload", "fixed", "--num-requests", "2", "--input-len", "32", "--output-len", "4"]


def _suite(tmp_path, repeat: int, axes: str = "page_size = [1, 16]"):
    path = tmp_path / "grid.toml"
    path.write_text(f'repeat = {repeat}\n[defaults]\nworkload = "fixed"\nnum_requests = 2\ninput_len = 32\n'
                    f'output_len = 4\n[axes]\n{axes}\n')
    return path


def test_kvbench_run_parses_its_config_once(cli, parses, capsys):
    # bounds, --capacity's table, the run and its result key all take the one spec
    assert cli("run", *SMALL, "--capacity", "qwen3-0.6b") == 0
    assert len(parses) == 1
    assert "requests that fit" in capsys.readouterr().out


def test_kvbench_run_bad_option_is_one_line_exit_2(cli, parses, capsys):
    assert cli("run", *SMALL, "--page-size", "0") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "page_size" in err[0] and "Traceback" not in err[0]
    assert len(parses) == 1


def test_a_validated_suite_parses_each_config_once_for_every_repeat(tmp_path, parses):
    suite = load_suite(_suite(tmp_path, repeat=3))
    assert len(parses) == len(suite.configs) == 2  # the load validates: one parse a config
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    session = GridSession(suite, run)
    rows = [session.run(gc) for gc in suite.configs]  # a warmup and 3 repeats each, rules, key
    assert [r["verdict"] for r in rows] == ["ok", "ok"]
    assert len(parses) == 2


def test_an_unvalidated_suite_parses_a_config_once_at_its_first_run(tmp_path, parses):
    # A pytest worker loads the suite unvalidated: the first run parses, the repeats reuse it.
    suite = load_suite(_suite(tmp_path, repeat=3), validate=False)
    assert parses == []
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    session = GridSession(suite, run)
    for gc in suite.configs:
        assert session.measure(gc)["status"] == "ok"
        assert gc.spec.key  # the resume's and a lost row's key: the same spec
    assert len(parses) == 2


def test_a_config_that_does_not_parse_is_a_failed_row_parsed_once(tmp_path, parses):
    suite = load_suite(_suite(tmp_path, repeat=3, axes="page_size = [0]"), validate=False)
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    row = GridSession(suite, run).measure(suite.configs[0])
    assert row["status"] == "failed" and "page_size" in row["error"] and row["verdict"] == "failed"
    assert row["key"] == repr(sorted(suite.configs[0].config.items()))  # no key: its options did not parse
    assert len(parses) == 1


def test_a_run_leaves_its_specs_engine_config_as_it_was():
    # One spec serves a config's warmup and every repeat: a run must write nothing into it.
    from harness.run.runner import run_config

    spec = RunSpec.parse({"workload": "fixed", "num_requests": 2, "input_len": 32, "output_len": 4,
                          "spec": "eagle", "page_size": 16})
    before = (spec.engine.to_dict(), spec.workload.to_dict(), spec.engine.num_pages)
    first, second = run_config(spec), run_config(spec)
    assert first["status"] == second["status"] == "ok"
    assert (spec.engine.to_dict(), spec.workload.to_dict(), spec.engine.num_pages) == before
    assert first["metrics"]["steps"] == second["metrics"]["steps"] and first["key"] == spec.key


def test_the_spec_keys_the_engine_it_runs_on():
    spec = RunSpec.parse({"page-size": 16})  # a TOML key may spell '-'
    assert spec.runs_on == "mini" and "engine" not in spec.key
    assert spec.on("sglang").key == spec.key + ",engine=sglang"
    assert spec.resolved()["engine"] == "mini" and "engine" not in spec.options()
    with pytest.raises(UsageError, match="engine must be one of mini, sglang"):
        RunSpec.parse({"engine": "vllm"})
    with pytest.raises(UsageError, match="unknown option 'nope'"):
        RunSpec.parse({"nope": 1})
