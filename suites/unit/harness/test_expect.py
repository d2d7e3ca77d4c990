"""Expected outcomes: rules, verdicts and their reasons."""

from __future__ import annotations

import pytest

from harness.judge.expect import ExpectError, expectation, judge, parse_rules

RULES = parse_rules([
    {"name": "strands", "when": {"policy": "unaligned", "page_size": {"min": 2}},
     "status": ["violated", "pool_exhausted"], "metrics": {"peak_stranded_slots": {"min": 1}},
     "violations": {"K1": {"min": 1}}},
    {"name": "leaks", "when": {"policy": "unaligned", "page_size": {"min": 2}, "free_policy": "segment"},
     "metrics": {"leaked_pages": {"equals": "predicted_leaked_pages", "min": 1}}, "violations": {"K8": {"min": 1}}},
], "test")


def row(status="ok", violations=None, **metrics):
    base = {"peak_stranded_slots": 0, "leaked_pages": 0, "predicted_leaked_pages": 0}
    return {"key": "k", "status": status, "violations": violations or {}, "metrics": {**base, **metrics}}


ALIGNED = {"policy": "aligned", "page_size": 16, "free_policy": "segment"}
UNALIGNED = {"policy": "unaligned", "page_size": 16, "free_policy": "segment"}
UNALIGNED_PS1 = {"policy": "unaligned", "page_size": 1, "free_policy": "segment"}


def test_clean_config_is_ok():
    assert judge(row(), expectation(ALIGNED, RULES)) == ("ok", [])
    assert judge(row(), expectation(UNALIGNED_PS1, RULES)) == ("ok", [])


def test_clean_config_with_a_violation_is_unexpected():
    verdict, reasons = judge(row("violated", {"K3": 2}), expectation(ALIGNED, RULES))
    assert verdict == "unexpected"
    assert any("K3 violations=2" in r for r in reasons)


def test_the_bug_reproduced_exactly_is_as_expected():
    r = row("violated", {"K1": 40, "K8": 5}, peak_stranded_slots=11, leaked_pages=5, predicted_leaked_pages=5)
    exp = expectation(UNALIGNED, RULES)
    assert exp.rules == ["strands", "leaks"]
    assert judge(r, exp) == ("as_expected", [])


@pytest.mark.parametrize("change, needle", [
    ({"leaked_pages": 6}, "leaked_pages=6, expected == predicted_leaked_pages=5"),
    ({"peak_stranded_slots": 0}, "peak_stranded_slots=0"),
    ({"violations": {"K1": 40}}, "K8 violations=0"),
    ({"violations": {"K1": 40, "K8": 5, "K5": 1}}, "K5 violations=1"),
    ({"status": "ok"}, "status 'ok'"),
])
def test_the_bug_measured_off_formula_is_unexpected(change, needle):
    base = dict(status="violated", violations={"K1": 40, "K8": 5}, peak_stranded_slots=11, leaked_pages=5,
                predicted_leaked_pages=5)
    base.update(change)
    r = row(**base)
    verdict, reasons = judge(r, expectation(UNALIGNED, RULES))
    assert verdict == "unexpected" and any(needle in x for x in reasons), reasons


def test_a_crash_is_failed_and_a_missing_metric_is_named():
    assert judge({"key": "k", "status": "failed", "error": "boom"}, expectation(ALIGNED, RULES))[0] == "failed"
    r = row("violated", {"K1": 1, "K8": 1}, peak_stranded_slots=3, leaked_pages=1, predicted_leaked_pages=1)
    del r["metrics"]["predicted_leaked_pages"]
    verdict, reasons = judge(r, expectation(UNALIGNED, RULES))
    assert verdict == "unexpected"


def test_malformed_rules():
    with pytest.raises(ExpectError, match="unknown key 'whenever'"):
        parse_rules([{"whenever": {}}], "t")
    with pytest.raises(ExpectError, match="status must be"):
        parse_rules([{"status": 3}], "t")
