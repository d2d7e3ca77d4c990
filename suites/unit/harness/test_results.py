"""results.jsonl: whole-line appends (even from two processes), torn lines, loading."""

from __future__ import annotations

import json
import multiprocessing as mp
from pathlib import Path

import pytest

from harness.store.results import ResultsError, append_row, load_rows, read_jsonl


def _writer(path: str, worker: int, n: int) -> None:
    for i in range(n):
        # Rows of very different sizes: a big one must not interleave with a small one.
        append_row(Path(path), {"key": f"w{worker}-{i}", "series": {"held": list(range((i % 7) * 3000))}})


def test_concurrent_appends_never_interleave(tmp_path):
    path = tmp_path / "results.jsonl"
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(path), w, 60)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        assert p.exitcode == 0
    lines = path.read_text().splitlines()
    assert len(lines) == 240
    rows = [json.loads(line) for line in lines]  # every line is whole JSON
    assert sorted(r["key"] for r in rows) == sorted(f"w{w}-{i}" for w in range(4) for i in range(60))


def test_a_torn_last_line_is_ignored_but_damage_elsewhere_is_an_error(tmp_path):
    path = tmp_path / "results.jsonl"
    append_row(path, {"key": "a"})
    append_row(path, {"key": "b"})
    with path.open("a") as fh:
        fh.write('{"key": "c", "metr')  # the writer was killed mid-line
    assert [r["key"] for r in read_jsonl(path)] == ["a", "b"]
    path.write_text('{"key": "a"}\nnot json\n{"key": "b"}\n')
    with pytest.raises(ResultsError, match="line 2 is not valid JSON"):
        read_jsonl(path)


@pytest.mark.parametrize("torn", ['{"key": "c", "metr', "x" * 70000])
def test_a_resume_appending_after_a_torn_line_keeps_every_row(tmp_path, torn):
    # The killed writer's fragment must not fuse with the resumed run's next row.
    path = tmp_path / "results.jsonl"
    append_row(path, {"key": "a"})
    with path.open("a") as fh:
        fh.write(torn)
    append_row(path, {"key": "c", "metrics": {"steps": 3}})
    assert [r["key"] for r in load_rows(path)] == ["a", "c"]
    assert path.read_text().endswith('"steps": 3}}\n')


def test_load_rows_keeps_the_latest_row_of_a_key(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for key, v in (("a", 1), ("b", 1), ("a", 2)):
        append_row(run / "results.jsonl", {"key": key, "metrics": {"v": v}})
    rows = load_rows(run)
    assert [(r["key"], r["metrics"]["v"]) for r in rows] == [("b", 1), ("a", 2)]
    assert load_rows(run / "results.jsonl") == rows


def test_missing_run_is_a_one_line_error(tmp_path, results_root):
    with pytest.raises(ResultsError, match="no run 'nope'"):
        load_rows("nope")


@pytest.mark.parametrize("row", [
    {"key": 7, "metrics": {}},
    {"metrics": {}},
    {"key": "a", "metrics": [1, 2]},
    {"key": "a", "violations": "K1"},
])
def test_compare_on_a_malformed_row_is_one_line_exit_2(tmp_path, capsys, row):
    from harness.cli import main

    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(row) + "\n")
    assert main(["compare", str(path), "--baseline", str(tmp_path / "none.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kvbench: error:") and "\n" not in err and "row" in err
