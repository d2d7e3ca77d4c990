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


def _engine_error_uses(path) -> list[str]:
    """Where a harness module names the engine's ConfigError other than to catch it:
    a raise, or the class handed to a reader (read_document, failure) to raise."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    caught = {id(n) for h in ast.walk(tree) if isinstance(h, ast.ExceptHandler) and h.type is not None
              for n in ast.walk(h.type)}
    return [f"{path}:{n.lineno}" for n in ast.walk(tree)
            if isinstance(n, ast.Name) and n.id == "ConfigError" and id(n) not in caught]


def test_the_harness_raises_no_engine_config_error():
    """harness/core/errors.py's rule: the harness raises its own errors (UsageError where no
    layer's class fits); the engine's ConfigError is only caught there, never raised."""
    from pathlib import Path

    import harness

    root = Path(harness.__file__).parent
    found = [where for path in sorted(root.rglob("*.py")) for where in _engine_error_uses(path)]
    assert found == []


def test_the_guard_sees_a_raise_and_a_reader_argument(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from mini_engine.errors import ConfigError\n"
                   "try:\n    pass\nexcept ConfigError:\n    raise ConfigError('x')\n"
                   "read_document('p', 'prompts file', ConfigError)\n")
    assert sorted(w.rsplit(":", 1)[1] for w in _engine_error_uses(bad)) == ["5", "6"]


@pytest.mark.parametrize("argv, words", [
    (["run", "--outputs"], "--outputs needs --json FILE to write them to"),
    (["run", "--gpu-mem", "10"], "--gpu-mem goes with --capacity"),
    (["sweep", "smoke", "--no-mlflow", "--mlflow-uri", "http://x"], "--no-mlflow and --mlflow-uri contradict"),
    (["conform"], "give one or more TRACE files, or --engine with a config"),
    (["conform", "--suite", "smoke"], "--suite goes with --engine"),
])
def test_former_engine_errors_are_still_one_line_exit_2(argv, words, capsys):
    one_line_exit_2(argv, capsys, words)


def test_an_unknown_engine_or_option_in_a_run_file_is_one_line_exit_2(tmp_path, capsys):
    for text, words in [('engine = "nope"\n', "engine must be one of mini, sglang (got 'nope')"),
                        ("page_sise = 16\n", "unknown option 'page_sise'")]:
        f = tmp_path / "run.toml"
        f.write_text(text)
        one_line_exit_2(["run", "--config", str(f)], capsys, words)
