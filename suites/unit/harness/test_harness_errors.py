"""The harness and CI code raise the harness's errors (harness.core.errors), not the engine's;
the CLI still prints one line and exits 2 for them."""

from __future__ import annotations

import json

import pytest

from harness.cli import main
from harness.core.errors import UsageError, HarnessError
from mini_engine.errors import KVBenchError


def one_line_exit_2(argv: list[str], capsys, words: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kvbench: error: ") and words in err[0], err


def a_run(root) -> str:
    run = root / "run"
    run.mkdir()
    row = {"key": "spec=none,ps=1", "test_id": "ps:1", "suite": "tiny", "status": "ok", "verdict": "ok",
           "config": {}, "metrics": {"peak_pages_held": 3}, "violations": {}}
    (run / "results.jsonl").write_text(json.dumps(row) + "\n")
    (run / "meta.json").write_text(json.dumps({"suite": "tiny", "hardware": {"profile": "cpu"}}))
    return str(run)


def test_baseline_errors_are_the_harness_own(tmp_path, capsys):
    from harness.judge.baseline import BaselineError, load_baseline

    assert issubclass(BaselineError, HarnessError) and not issubclass(BaselineError, KVBenchError)
    with pytest.raises(BaselineError, match="baseline '.*missing.json': not found"):
        load_baseline(tmp_path / "missing.json")
    one_line_exit_2(["compare", a_run(tmp_path), "--baseline", str(tmp_path / "missing.json")], capsys,
                    "missing.json': not found")


def test_history_errors_are_the_harness_own(tmp_path, capsys):
    from harness.judge.history import find_nights

    file = tmp_path / "f"
    file.write_text("")
    with pytest.raises(UsageError, match="is not a directory") as err:
        find_nights([file])
    assert not isinstance(err.value, KVBenchError)
    one_line_exit_2(["history", "smoke", "--nights", str(file)], capsys, "is not a directory")
    one_line_exit_2(["history", "smoke", "--last", "1"], capsys, "--last must be an integer >= 2")


def test_compare_usage_errors_are_the_harness_own(tmp_path, capsys):
    run = a_run(tmp_path)
    one_line_exit_2(["compare", run, run, "--baseline", "c.json"], capsys, "--baseline goes with one run")


def test_a_row_that_cannot_be_written_is_a_harness_error():
    from harness.grid.execute import ResultWriteError

    assert issubclass(ResultWriteError, HarnessError) and not issubclass(ResultWriteError, KVBenchError)
