"""Config files are declared models: every committed file validates, every bad one is one line.

And the figures the sweep prints and compare gates come from the metric schema.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.ci.permissions import parse_permissions
from harness.ci.runners import load_registry, parse_registry
from harness.core.errors import UsageError
from harness.core.metrics import COLUMNS, METRICS
from harness.grid.suites import SuiteError, available, load_suite
from harness.judge.baseline import BaselineError, build, counters_of, load_baseline, timings_of
from harness.judge.compare import compare_rows
from harness.schemas import parse
from harness.schemas.baseline import BaselineFile
from harness.schemas.ci import PermissionsFile, RegistryFile
from harness.schemas.suite import SuiteFile
from harness.view.summary import ROLLED, group_rows, summary_rows

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("name", available())
def test_every_committed_suite_validates(name):
    assert load_suite(name, validate=False).configs


def test_committed_ci_files_and_baselines_validate():
    registry = load_registry(ROOT / "ci" / "runners.toml")
    perms = parse_permissions(json.loads((ROOT / "ci" / "permissions.json").read_text()), "permissions.json",
                              registry.labels)
    assert perms.roles and registry.runners
    for path in sorted((ROOT / "results" / "baselines").glob("*.json")):
        assert load_baseline(path)["configs"]


@pytest.mark.parametrize("model, data, line", [
    # where (a dotted path, list indices in brackets), what is allowed, the value found
    (SuiteFile, {"repeat": True}, "s: repeat must be an integer from 1 to 100 (got True)"),
    (SuiteFile, {"repeat": 2.0}, "s: repeat must be an integer from 1 to 100 (got 2.0)"),
    (SuiteFile, {"colour": "red", "repeat": 1},
     "s: unknown key 'colour' (allowed: name, description, repeat, marks, defaults, axes, include, exclude, expect)"),
    (SuiteFile, {"include": [{"page_size": 1}, 3]}, "s: include[1] must be a table (got 3)"),
    (SuiteFile, {"name": ""}, "s: name must not be empty (got '')"),
    (SuiteFile, {"description": 3}, "s: description must be a string (got 3)"),
    (SuiteFile, {"expect": [{}, {"status": ["ok", "fine"]}]},
     "s: expect[1].status must be one of ok, violated, pool_exhausted, failed or a non-empty list of them (got ['ok', 'fine'])"),
    (SuiteFile, {"expect": [{"metrics": {"steps": {"min": True}}}]},
     "s: expect[0].metrics.steps.min must be a number or a metric name (got True)"),
    (RegistryFile, {"runners": {"cpu": {"profile": "cpu", "gpus": False, "runs_on": "x"}}},
     "s: runners.cpu.gpus must be an integer >= 0 (got False)"),
    (RegistryFile, {"runners": {"cpu": {"profile": "cpu", "gpus": 0}}}, "s: runners.cpu: missing key 'runs_on'"),
    (PermissionsFile, [], "s: the file must be an object (got [])"),
    (PermissionsFile, {"version": 1, "roles": {"r": {"commands": "rerun-test"}}},
     "s: roles.r.commands must be a list drawn from rerun-test, rerun-suite, tag-and-rerun-ci, rerun-sglang (got 'rerun-test')"),
    (BaselineFile, {"profile": "cpu", "created": "", "git_commit": None,
                    "configs": {"k": {"counters": {"steps": "3"}, "timings": {}}}},
     "s: configs.k.counters.steps must be a finite number (got '3')"),
    (BaselineFile, {"profile": "cpu", "created": "", "git_commit": None,
                    "configs": {"k": {"counters": {"steps": 3}, "timings": {"wall_s": {"median": 1.0}}}}},
     "s: configs.k.timings.wall_s: missing key 'spread'"),
    (BaselineFile, {"profile": "cpu", "created": "", "git_commit": None,
                    "configs": {"k": {"counters": {"leaked_pages": -5}, "timings": {}}}},
     "s: configs.k.counters.leaked_pages must be a count, a number >= 0 (got -5)"),
])
def test_the_first_error_is_one_line_naming_where_what_and_the_value(model, data, line):
    tables = "object" if model in (PermissionsFile, BaselineFile) else "table"
    with pytest.raises(UsageError) as err:
        parse(model, data, "s", UsageError, tables=tables)
    assert str(err.value) == line


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 300) | st.floats(allow_nan=True) | st.sampled_from(
        ["", "ok", "none", "cpu", "*", "K1", "steps", "suites/x.py", "rerun-test"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(
        ["name", "repeat", "marks", "axes", "expect", "when", "status", "metrics", "min", "equals", "runners", "cpu",
         "profile", "gpus", "runs_on", "version", "roles", "commands", "users", "configs", "counters", "timings",
         "median", "spread", "defaults", "runner", "files", "glob", "x"]), inner, max_size=4),
    max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(model=st.sampled_from([SuiteFile, RegistryFile, PermissionsFile, BaselineFile]), data=json_values)
def test_any_file_content_validates_or_is_one_line(model, data):
    # Whatever a file holds, the loader answers a model or one line; never a traceback.
    try:
        parse(model, data, "f", UsageError, {"labels": ("cpu",), "options": ("page_size",), "metrics": {"steps"}})
    except UsageError as err:
        assert str(err).startswith("f: ") and "\n" not in str(err), str(err)


def test_loaders_raise_their_own_error_class(tmp_path):
    bad = tmp_path / "s.toml"
    bad.write_text("repeat = true\n[axes]\npage_size = [1]\n")
    with pytest.raises(SuiteError, match=r"^suite s.toml: repeat must be an integer from 1 to 100 \(got True\)$"):
        load_suite(bad)
    base = tmp_path / "b.json"
    base.write_text(json.dumps({"profile": "cpu", "created": "", "git_commit": None, "configs": {"k": {}}}))
    with pytest.raises(BaselineError, match="configs.k: missing key 'counters'"):
        load_baseline(base)
    data = tomllib.loads((ROOT / "ci" / "runners.toml").read_text())
    data["runners"]["cpu"]["gpus"] = True  # a bool is not an integer, though Python says it is one
    with pytest.raises(UsageError, match=r"runners.cpu.gpus must be an integer >= 0 \(got True\)"):
        parse_registry(data)


def _row(key: str, **metrics) -> dict:
    return {"key": key, "status": "ok", "suite": "s", "verdict": "ok", "metrics": metrics, "violations": {}}


def test_the_summary_table_is_the_schemas_columns():
    # Each declared column, in its declared place, its head made of its words and its unit.
    assert [m.column for m in COLUMNS] == sorted(m.column for m in METRICS.values() if m.column)
    assert all(m.column_head.split("\n")[-len(m.unit.split()):] == m.unit.split() for m in COLUMNS)
    row = _row("a", **{m.name: 10 * m.column for m in COLUMNS})
    assert summary_rows([row])[0][2:-1] == [str(10 * m.column) for m in COLUMNS]
    rows = [_row("a", **{m.name: 1 for m in COLUMNS}), _row("b", **{m.name: 3 for m in COLUMNS})]
    folded = group_rows(rows)[0][7:-1]
    assert folded == [("3" if m.rollup == "max" else "4") for m in ROLLED] and ROLLED


def test_compare_gates_each_figure_as_its_kind_declares():
    # One row carrying every declared scalar; the next changes each by +50%.
    figures = {name: 8.0 if m.kind != "counter" else 8 for name, m in METRICS.items()
               if not name.startswith("violations.")}
    base, *_ = build([_row("a", **figures)], "cpu", "c")
    gated = {name for name, m in METRICS.items() if m.gate != "none" and name in figures}
    entry = base["configs"]["a"]
    assert set(entry["counters"]) | set(entry["timings"]) == gated
    assert set(counters_of(_row("a", **figures))) == {n for n in gated if METRICS[n].gate == "exact"}
    assert set(timings_of(_row("a", **figures))) == {n for n in gated if METRICS[n].gate == "noise"}
    later = _row("a", **{name: v * 1.5 for name, v in figures.items()})
    found = {f.metric: f.verdict for f in compare_rows([later], base).findings}
    exact = {n for n in gated if METRICS[n].gate == "exact"}
    # +50% on every counter: worse where lower is better, better where higher is, news where neither
    want = {"lower": "regression", "higher": "improvement", "none": "changed"}
    assert {n: found[n] for n in exact} == {n: want[METRICS[n].better] for n in exact}
    report = compare_rows([later], base)
    assert {f.metric for f in report.gating} >= exact and report.regressed
    assert {n for n in found if n != "status"} == gated  # info figures are shown nowhere in the verdicts


def test_an_association_may_grant_several_roles_and_they_add_up():
    data = json.loads((ROOT / "ci" / "permissions.json").read_text())
    data["associations"] = {"CONTRIBUTOR": ["gpu-tester", "pr-author"]}
    perms = parse_permissions(data, "permissions.json")
    grant = perms.grant("someone", "CONTRIBUTOR", False)
    assert grant.roles == ("gpu-tester", "pr-author") and grant.allows("rerun-test", "1-gpu-h100")
