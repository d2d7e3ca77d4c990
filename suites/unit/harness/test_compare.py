"""Baselines and regression verdicts, as properties and through the CLI."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.judge.baseline import BaselineError, build, load_baseline, write_baseline
from harness.judge.compare import compare_rows

COUNTERS = ("steps", "output_tokens", "peak_stranded_slots", "leaked_pages", "syncs", "retractions",
            "peak_pages_held", "stranded_slots_sum")

counter_values = st.integers(min_value=0, max_value=10_000)
row_strategy = st.builds(
    lambda key, counters, viol, tps: {
        "key": key, "status": "violated" if any(viol.values()) else "ok", "test_id": key,
        "metrics": {**counters, "output_tokens_per_s": tps, "tau": 3.5},
        "violations": {k: v for k, v in viol.items() if v},
    },
    st.text("abcdefgh=,", min_size=1, max_size=12),
    st.fixed_dictionaries({c: counter_values for c in COUNTERS}),
    st.fixed_dictionaries({"K1": st.integers(0, 50), "K8": st.integers(0, 5)}),
    st.floats(min_value=1.0, max_value=1e6),
)
rows_strategy = st.lists(row_strategy, min_size=1, max_size=8, unique_by=lambda r: r["key"])


def baseline_of(rows):
    return build(rows, "cpu", "abc")[0]


@given(rows_strategy)
def test_an_unchanged_rerun_passes(rows):
    report = compare_rows(copy.deepcopy(rows), baseline_of(rows))
    assert not report.regressed
    assert {f.verdict for f in report.findings} == {"ok"}


@given(rows_strategy, st.data())
def test_any_counter_change_gates_and_is_labelled_by_its_direction(rows, data):
    base = baseline_of(rows)
    now = copy.deepcopy(rows)
    victim = data.draw(st.sampled_from(now))
    metric = data.draw(st.sampled_from(COUNTERS))
    delta = data.draw(st.sampled_from([-1, 1, 7]))
    if victim["metrics"][metric] + delta < 0:
        delta = 1
    victim["metrics"][metric] += delta
    report = compare_rows(now, base)
    assert report.regressed  # the gate stays exact, whichever way the counter moved
    assert [(f.key, f.metric) for f in report.gating] == [(victim["key"], metric)]
    # fewer is better for these, except the workload's own counts, which have no direction
    want = "changed" if metric in ("steps", "output_tokens") else ("regression" if delta > 0 else "improvement")
    assert [f.verdict for f in report.gating] == [want]
    assert report.direction == {"regression": "regressed", "improvement": "improved", "changed": "changed"}[want]


@given(rows_strategy, st.data())
def test_a_new_violation_is_a_regression(rows, data):
    base = baseline_of(rows)
    now = copy.deepcopy(rows)
    victim = data.draw(st.sampled_from(now))
    victim["violations"]["K5"] = 1
    report = compare_rows(now, base)
    assert [(f.key, f.metric, f.verdict) for f in report.regressions] == [(victim["key"], "violations.K5", "regression")]
    assert "new violation" in report.regressions[0].change


def _timed(samples):
    return {"key": "k", "status": "ok", "metrics": {"steps": 10, "wall_s": sorted(samples)[len(samples) // 2],
                                                     "output_tokens_per_s": 1000.0},
            "samples": {"wall_s": samples}, "violations": {}}


def test_timing_regression_needs_size_and_significance():
    base = baseline_of([_timed([1.00, 1.01, 0.99, 1.02, 1.00, 0.98])])
    slower = compare_rows([_timed([1.30, 1.31, 1.29, 1.33, 1.30, 1.32])], base)
    assert [(f.metric, f.verdict) for f in slower.regressions] == [("wall_s", "regression")]
    # 30% slower in the median but the samples overlap the baseline's: noise, not a regression.
    noisy = compare_rows([_timed([0.9, 1.8, 1.3, 0.95, 1.6, 1.0])], base)
    assert not noisy.regressed
    # 5% slower and significant: below the 10% bar.
    small = compare_rows([_timed([1.05, 1.06, 1.05, 1.07, 1.04, 1.05])], base)
    assert not small.regressed
    # One sample each: never enough evidence for a timing regression.
    single = compare_rows([_timed([2.0])], baseline_of([_timed([1.0])]))
    assert not single.regressed
    faster = compare_rows([_timed([0.70, 0.71, 0.69, 0.72, 0.70, 0.71])], base)
    assert [f.verdict for f in faster.findings if f.metric == "wall_s"] == ["improvement"]


def test_only_a_runs_own_memory_is_gated():
    # Process RSS and NVML's used bytes hold what earlier configs in the worker left:
    # tight repeats shifted by test order must not read as a regression. torch's
    # peak is reset per run, so it is the run's own and gated like a timing.
    def row(mib):
        figures = {m: mib * 2**20 for m in ("mem_rss_bytes", "rss_peak_bytes", "mem_nvml_used_bytes",
                                            "mem_torch_peak_bytes")}
        return {"key": "k", "status": "ok", "violations": {}, "metrics": {"steps": 1, **figures},
                "samples": {m: [v + i for i in range(4)] for m, v in figures.items()}}

    report = compare_rows([row(600)], baseline_of([row(500)]))
    assert [f.metric for f in report.regressions] == ["mem_torch_peak_bytes"]


def test_new_missing_and_status_findings():
    a = {"key": "a", "status": "ok", "metrics": {"steps": 1}, "violations": {}}
    b = {"key": "b", "status": "ok", "metrics": {"steps": 2}, "violations": {}}
    base = baseline_of([a, b])
    c = {"key": "c", "status": "ok", "metrics": {"steps": 3}, "violations": {}}
    failed = dict(a, status="failed")
    report = compare_rows([failed, c], base)
    verdicts = {(f.key, f.metric): f.verdict for f in report.findings}
    assert verdicts[("a", "status")] == "regression"
    assert verdicts[("c", "*")] == "new" and verdicts[("b", "*")] == "missing"
    md = report.table("markdown")
    assert md.splitlines()[0] == "| config | metric | baseline | now | change | verdict |"
    assert "ok -> failed" in report.table("text")


def test_load_baseline_errors(tmp_path):
    with pytest.raises(BaselineError, match="baseline '.*none.json': not found"):
        load_baseline(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(BaselineError, match="baseline '.*bad.json': not valid JSON"):
        load_baseline(bad)
    bad.write_text(json.dumps({"profile": "cpu"}))
    with pytest.raises(BaselineError, match="missing key 'created'"):
        load_baseline(bad)
    bad.write_text(json.dumps({"profile": "cpu", "created": "", "git_commit": None,
                               "configs": {"a": {"counters": {"steps": True}, "timings": {}}}}))
    with pytest.raises(BaselineError, match=r"configs\.a\.counters\.steps must be a finite number \(got True\)"):
        load_baseline(bad)
    good = tmp_path / "h100.json"
    write_baseline(good, build([{"key": "a", "status": "ok", "metrics": {"steps": 1}}], "h100", "abc")[0])
    assert load_baseline(good, expected_profile="h100")["configs"]["a"]["counters"] == {"steps": 1}
    with pytest.raises(BaselineError, match="is for profile 'h100', but the run is on 'cpu'"):
        load_baseline(good, expected_profile="cpu")


def test_only_configs_of_the_swept_suites_can_be_missing():
    def r(key, suite):
        return {"key": key, "status": "ok", "metrics": {"steps": 1}, "violations": {}, "suite": suite}

    base = baseline_of([r("a1", "smoke"), r("a2", "smoke"), r("b1", "invariants")])
    report = compare_rows([r("a1", "smoke")], base)
    assert [(f.key, f.verdict) for f in report.findings if f.metric == "*"] == [("a2", "missing")]
    assert not report.regressed
