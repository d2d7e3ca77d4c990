"""compare and baseline judge the evidence a row gives, not only what it keeps: a figure
that vanished or stopped being a number gates, a row without its suite still misses its
configs, and a baseline blesses counts only (N5, L5)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_faults_trust import ROW, cli, make_run

ROWS = [{**ROW, "key": f"spec=none,ps={ps}", "test_id": f"ps:{ps}", "metrics": {**ROW["metrics"], "wall_s": 0.1 * ps}}
        for ps in (1, 2, 4, 8)]
NOT_A_NUMBER = st.one_of(st.none(), st.booleans(), st.text(max_size=8), st.lists(st.integers(), max_size=2))


def _compare(tmp_path, capsys, monkeypatch, rows) -> tuple[int, str, list[str]]:
    root = tmp_path / "results"
    make_run(root, "good", ROWS)
    make_run(root, "bad", rows)
    monkeypatch.setenv("KVBENCH_RESULTS", str(root))
    return cli(["compare", "good", "bad"], capsys)


def _damage(tmp_path_factory, capsys, monkeypatch, fn):
    rows = json.loads(json.dumps(ROWS))
    for row in rows:
        fn(row)
    return _compare(tmp_path_factory.mktemp("c"), capsys, monkeypatch, rows)


@pytest.mark.parametrize("what", ["a counter", "a timing"])
def test_a_vanished_figure_gates(tmp_path_factory, capsys, monkeypatch, what):
    drop = {"a counter": lambda r: r["metrics"].pop("leaked_pages"),
            "a timing": lambda r: r["metrics"].pop("wall_s")}[what]
    code, out, err = _damage(tmp_path_factory, capsys, monkeypatch, drop)
    assert code == 1 and "not measured now" in out and "bless it" not in out, (out, err)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          derandomize=True)
@given(value=NOT_A_NUMBER, name=st.sampled_from(["leaked_pages", "peak_pages_held", "wall_s"]))
def test_a_figure_turned_non_numeric_is_refused_when_read(tmp_path_factory, capsys, monkeypatch, value, name):
    """R6: a figure that is no number (a bool once compared as 0) is refused before compare
    judges it (harness/core/figures.py); it was "missing", which gated, but as "bless it"."""
    code, out, err = _damage(tmp_path_factory, capsys, monkeypatch, lambda r: r["metrics"].update({name: value}))
    assert code == 2 and len(err) == 1 and f"metrics.{name}" in err[0] and "not a number" in err[0], (out, err)


def test_rows_without_a_suite_still_miss_configs(tmp_path, capsys, monkeypatch):
    rows = [{k: v for k, v in r.items() if k != "suite"} for r in ROWS[:2]]
    code, out, err = _compare(tmp_path, capsys, monkeypatch, rows)
    assert code == 1 and "2 configs of good missing from bad" in out, (out, err)


def test_an_unchanged_run_still_passes(tmp_path, capsys, monkeypatch):
    code, out, err = _compare(tmp_path, capsys, monkeypatch, ROWS)
    assert code == 0, (out, err)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          derandomize=True)
@given(value=st.one_of(NOT_A_NUMBER, st.integers(max_value=-1), st.floats(max_value=-0.001, allow_nan=False, allow_infinity=False)),
       where=st.sampled_from(["metrics.leaked_pages", "metrics.peak_pages_held", "violations.K1"]))
def test_baseline_blesses_counts_only(tmp_path_factory, capsys, monkeypatch, value, where):
    field, name = where.split(".")
    rows = json.loads(json.dumps(ROWS))
    rows[1][field][name] = value
    root = tmp_path_factory.mktemp("b") / "results"
    make_run(root, "bad", rows)
    monkeypatch.setenv("KVBENCH_RESULTS", str(root))
    out = root / "base.json"
    code, _, err = cli(["baseline", "bad", "--out", out], capsys)
    assert code == 2 and len(err) == 1 and where in err[0], err
    assert not out.exists()
