"""One rule for numbers read from files: integers within int64, floats finite, refused
where they are read in one line naming the field (harness/core/numbers.py); and the sizes a
file or an option can ask for are bounded before anything is built."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_faults_trust import ROW, cli, make_run

# Past int64 (up to the 401 digits of the finding) or not finite, written as JSON text:
# Python writes inf as Infinity, which the reader refuses already; 1e400 it reads as inf.
BAD_NUMBERS = st.one_of(
    st.integers(min_value=2**63, max_value=10**400),
    st.integers(max_value=-2**63 - 1, min_value=-10**400),
    st.sampled_from(["1e400", "-1e999"]),
)


def _text(value) -> str:
    return value if isinstance(value, str) else str(value)


def _damaged_row(value, field: str) -> str:
    row = json.loads(json.dumps(ROW))
    target, name = (row["metrics"], field.split(".", 1)[1]) if field.startswith("metrics.") else (row, field)
    target[name] = "@@"
    return json.dumps(row).replace('"@@"', _text(value))


def _commands(root: Path) -> list[list]:
    return [["compare", "bad", "--baseline", root / "base.json"], ["compare", "good", "bad"],
            ["baseline", "bad", "--out", root / "new.json"], ["report", "bad", "--out", root / "r.html"],
            ["history", "tiny", "--nights", root / "runs"]]


@pytest.mark.parametrize("field", ["metrics.peak_pages_held", "metrics.wall_s", "finished_at"])
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          derandomize=True)
@given(value=BAD_NUMBERS)
def test_a_number_past_the_rule_is_one_line_everywhere(tmp_path_factory, capsys, monkeypatch, field, value):
    """N4: a 401-digit integer (or 1e400) in a row: one line naming the field, exit 2."""
    from harness.judge.baseline import build, write_baseline

    root = tmp_path_factory.mktemp("num") / "results"
    make_run(root, "good")
    bad = make_run(root, "bad")
    (bad / "results.jsonl").write_text(_damaged_row(value, field) + "\n")
    write_baseline(root / "base.json", build([ROW], "cpu", "abc")[0])
    monkeypatch.setenv("KVBENCH_RESULTS", str(root))
    for argv in _commands(root):
        code, _, err = cli(argv, capsys)
        assert code == 2 and len(err) == 1, (argv, err)
        assert field in err[0] and ("int64" in err[0] or "finite" in err[0]), (argv, err)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          derandomize=True)
@given(value=BAD_NUMBERS)
def test_meta_and_baseline_numbers_follow_the_rule(tmp_path_factory, capsys, monkeypatch, value):
    root = tmp_path_factory.mktemp("meta") / "results"
    run = make_run(root, "good")
    (run / "meta.json").write_text('{"suite": "tiny", "hardware": {"profile": "cpu"}, "created": %s}' % _text(value))
    monkeypatch.setenv("KVBENCH_RESULTS", str(root))
    code, _, err = cli(["report", "good", "--out", root / "r.html"], capsys)
    assert code == 2 and len(err) == 1 and "created" in err[0], err
    base = root / "base.json"
    base.write_text('{"profile": "cpu", "git_commit": "x", "created": %s, "configs": {}}' % _text(value))
    code, _, err = cli(["compare", "good", "--baseline", base], capsys)
    assert code == 2 and len(err) == 1 and "created" in err[0], err


@pytest.mark.parametrize("bound", ["inf", "-inf", "nan", "1e400", str(2**63)])
def test_a_non_finite_expect_bound_is_refused_at_load(tmp_path, capsys, monkeypatch, bound):
    """N3: `max = inf` loaded, ran every config and left a results file no command could read."""
    monkeypatch.setenv("KVBENCH_RESULTS", str(tmp_path / "results"))
    suite = tmp_path / "s.toml"
    suite.write_text("[defaults]\nnum_requests = 2\ninput_len = 24\noutput_len = 6\nmin_len = 6\n"
                     "[axes]\npage_size = [1, 16]\n[[expect]]\nname = \"e\"\n"
                     f"metrics = {{leaked_pages = {{max = {bound}}}}}\n")
    code, _, err = cli(["sweep", suite, "--no-mlflow", "--run-id", "r"], capsys)
    assert code == 2 and len(err) == 1 and "expect[0].metrics.leaked_pages.max" in err[0], err
    assert not (tmp_path / "results" / "runs" / "r").exists()


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          derandomize=True)
@given(sizes=st.lists(st.integers(min_value=1, max_value=60), min_size=1, max_size=5))
def test_the_grid_size_is_bounded_at_load(tmp_path_factory, sizes):
    """N10: 5 axes of 40 values (10**8 configs) grew to 23 GB; the count is checked first."""
    from harness.grid.suites import MAX_CONFIGS, SuiteError, load_suite

    names = ["page_size", "max_running", "input_len", "output_len", "num_requests"][:len(sizes)]
    path = tmp_path_factory.mktemp("grid") / "g.toml"
    path.write_text("[axes]\n" + "".join(f"{n} = {list(range(1, k + 1))}\n" for n, k in zip(names, sizes)))
    total = math.prod(sizes)
    if total > MAX_CONFIGS:
        with pytest.raises(SuiteError, match=f"more than {MAX_CONFIGS} configs"):
            load_suite(path, validate=False)
    else:
        assert len(load_suite(path, validate=False).configs) == total


@pytest.mark.parametrize("field", ["num_pages", "page_size", "swa_num_pages"])
@pytest.mark.parametrize("command", ["replay", "conform"])
def test_a_trace_header_of_a_huge_pool_is_one_line(tmp_path, capsys, field, command):
    """M7/N16/N18: 10**12 pages in a header was a MemoryError (replay) or a 'divergence' (conform)."""
    head = {"format": "kvbench-trace", "version": 1, "page_size": 16, "num_pages": 64, "swa_num_pages": 64}
    head[field] = 10**12
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps(head) + "\n" + json.dumps({"op": "free", "indices": [], "available": 0}) + "\n")
    code, _, err = cli([command, trace], capsys)
    assert code == 2 and len(err) == 1 and field in err[0] and "slots" in err[0], err


@pytest.mark.parametrize("argv, option", [(["--repeat", "100000000"], "--repeat"), (["--repeat", "0"], "--repeat"),
                                          (["--timeout", "nan"], "--timeout"), (["--timeout", "0"], "--timeout")])
def test_bisect_bounds(tmp_path, capsys, argv, option):
    """N10: bisect --repeat is bounded like a suite's repeat; its per-commit timeout is an option."""
    code, _, err = cli(["bisect", "--good", "HEAD", "--bad", "HEAD", "--config", "x", *argv], capsys)
    assert code == 2 and len(err) == 1 and err[0].startswith(f"kvbench: error: {option} must be"), err


@pytest.mark.parametrize("command", ["replay", "conform"])
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          derandomize=True)
@given(damage=st.sampled_from(["negative prefix", "negative seq", "seq below prefix", "lengths differ",
                               "negative row_width"]))
def test_a_malformed_trace_record_is_refused_not_a_divergence(tmp_path_factory, capsys, command, damage):
    """N18: replay called these kvbench divergences (exit 1) where conform refused them (exit 2)."""
    head = {"format": "kvbench-trace", "version": 1, "page_size": 1, "num_pages": 64, "row_width": 64}
    rec = {"op": "alloc_extend", "pool": "full", "prefix_lens": [0], "seq_lens": [4], "last_locs": [-1],
           "out": [[1, 2, 3, 4]], "available": 60}
    if damage == "negative prefix":
        rec["prefix_lens"] = [-3]
    elif damage == "negative seq":
        rec["seq_lens"] = [-4]
    elif damage == "seq below prefix":
        rec["prefix_lens"] = [8]
    elif damage == "lengths differ":
        rec["seq_lens"] = [4, 4]
    else:
        head["row_width"] = -1
    trace = tmp_path_factory.mktemp("t") / "t.jsonl"
    trace.write_text(json.dumps(head) + "\n" + json.dumps(rec) + "\n")
    code, _, err = cli([command, trace], capsys)
    assert code == 2 and len(err) == 1 and err[0].startswith("kvbench: error: "), err
