"""A run's config is parsed once where it enters: `kvbench run`.

The counter is RunSpec.parse itself, wrapped: every layer below the boundary takes the
spec, so a second parse anywhere (the bounds, the capacity table, the runner, the
result key) shows as one more call.
"""

from __future__ import annotations

from unittest import mock

import pytest

from harness.core.errors import UsageError
from harness.core.run_spec import RunSpec

SMALL = ["--workload", "fixed", "--num-requests", "2", "--input-len", "32", "--output-len", "4"]


@pytest.fixture
def parses():
    """The RunSpec.parse calls made while the fixture is active (a list of the configs)."""
    calls: list[dict] = []
    real = RunSpec.parse.__func__

    def counted(cls, config):
        calls.append(dict(config))
        return real(cls, config)

    with mock.patch.object(RunSpec, "parse", classmethod(counted)):
        yield calls


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
