"""Suite [[expect]] rules that can never hold or never match are refused when the suite
loads, in one line naming the rule and field, not found after every config ran (N9)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_faults_trust import cli

GRID = "[axes]\npage_size = [1, 16]\n[defaults]\nnum_requests = 4\n"


def _listed(tmp_path, capsys, monkeypatch, text: str) -> tuple[int, list[str]]:
    monkeypatch.setenv("KVBENCH_RESULTS", str(tmp_path / "results"))
    suite = tmp_path / "s.toml"
    suite.write_text(text)
    code, _, err = cli(["sweep", suite, "--list"], capsys)
    return code, err


def _rule(body: str) -> str:
    return GRID + f'[[expect]]\nname = "r"\n{body}\n'


@pytest.mark.parametrize("body, field", [
    ("status = []", "expect[0].status"),
    ('when = {page_size = "16"}', "when.page_size"),
    ("when = {page_size = true}", "when.page_size"),
    ("when = {page_size = []}", "when.page_size"),
    ("when = {page_size = {min = 20, max = 10}}", "expect[0].when.page_size"),
    ('when = {spec = "medusa"}', "when.spec"),
    ("when = {page_size = {min = nan}}", "expect[0].when.page_size.min"),
    ("when = {policy = {min = 1}}", "when.policy"),
    ("metrics = {leaked_pages = {min = 5, max = 1}}", "expect[0].metrics.leaked_pages"),
    ("violations = {K1 = {min = 3, max = 2}}", "expect[0].violations.K1"),
])
def test_a_rule_that_cannot_match_or_hold_is_refused_at_load(tmp_path, capsys, monkeypatch, body, field):
    code, err = _listed(tmp_path, capsys, monkeypatch, _rule(body))
    assert code == 2 and len(err) == 1 and field in err[0], err
    assert "Traceback" not in err[0]


@pytest.mark.parametrize("body", ["status = \"violated\"", "when = {page_size = 16, spec = [\"none\", \"dflash\"]}",
                                  "when = {page_size = {min = 2, max = 2}}", "when = {window = \"none\"}",
                                  "metrics = {leaked_pages = {min = 0, max = 0}}"])
def test_a_rule_that_can_match_still_loads(tmp_path, capsys, monkeypatch, body):
    code, err = _listed(tmp_path, capsys, monkeypatch, _rule(body))
    assert code == 0, err


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(low=st.integers(-5, 50), high=st.integers(-5, 50))
def test_min_above_max_is_refused_and_only_then(tmp_path_factory, capsys, monkeypatch, low, high):
    tmp = tmp_path_factory.mktemp("r")
    code, err = _listed(tmp, capsys, monkeypatch, _rule(f"metrics = {{steps = {{min = {low}, max = {high}}}}}"))
    assert (code == 2) == (low > high), err


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.one_of(st.booleans(), st.text("0123456789abnoe -", max_size=4).map(lambda s: f'"{s}"'),
                       st.just("[]"), st.integers(-3, 0)))
def test_a_page_size_no_config_can_have_is_refused(tmp_path_factory, capsys, monkeypatch, value):
    tmp = tmp_path_factory.mktemp("w")
    text = str(value).lower() if isinstance(value, bool) else str(value)
    code, err = _listed(tmp, capsys, monkeypatch, _rule(f"when = {{page_size = {text}}}"))
    if text == '"none"':
        return  # "none" is TOML's null: "not set" may be said of any option
    assert code == 2 and len(err) == 1 and "page_size" in err[0], err


def test_an_axis_table_may_not_set_another_axis(tmp_path, capsys, monkeypatch):
    text = '[axes]\npage_size = [1, 16]\npolicy = [{page_size = 4, policy = "aligned"}]\n'
    code, err = _listed(tmp_path, capsys, monkeypatch, text)
    assert code == 2 and len(err) == 1 and "axes.policy" in err[0] and "page_size" in err[0], err
