"""Direction-aware verdicts (harness/core/direction.py) and the roll-up by metric x axis (harness/judge/rollup.py)."""

from __future__ import annotations

import itertools

from harness.core.direction import counter_verdict, status_verdict
from harness.core.metrics import METRICS
from harness.judge.baseline import build
from harness.judge.compare import compare_rows
from harness.judge.rollup import rollup_lines


def test_each_metric_declares_which_way_is_better():
    assert {m.better for m in METRICS.values()} == {"lower", "higher", "none"}
    assert counter_verdict("leaked_pages", 12, 11) == "improvement"  # fewer leaks: better, not a regression
    assert counter_verdict("leaked_pages", 11, 12) == "regression"
    assert counter_verdict("finished_requests", 11, 12) == "improvement"
    assert counter_verdict("output_tokens", 100, 90) == "changed"  # the workload's own count: no direction
    assert counter_verdict("peak_tokens_held", 5, 5) == "ok"
    assert status_verdict("ok", "violated") == "regression" and status_verdict("failed", "ok") == "improvement"
    assert status_verdict("violated", "pool_exhausted") == "changed"


def _row(spec, ps, profile, window, reserved, leaked=0):
    cfg = {"spec": spec, "page_size": ps, "profile": profile, "window": window,
           "block_size": 16 if spec == "dflash" else None}
    key = ",".join(f"{k}={v}" for k, v in cfg.items())
    return {"key": key, "test_id": key, "config": cfg, "status": "ok", "suite": "s",
            "metrics": {"peak_reserved_slots": reserved, "leaked_pages": leaked}, "violations": {}}


GRID = list(itertools.product(("dflash", "eagle"), (1, 16, 64), ("a", "b", "c"), (None, 64, 128)))


def test_one_rule_change_is_one_line_per_metric_naming_the_axes_it_spans():
    before = [_row(s, ps, p, w, 384 if s == "dflash" else 100, leaked=2) for s, ps, p, w in GRID]
    # DFLASH reserves three blocks instead of two: +50% reserved slots in all 27 DFLASH configs;
    # one leak fewer in the profile-c configs at ps 64 of both algorithms.
    after = [_row(s, ps, p, w, 576 if s == "dflash" else 100, leaked=1 if (p, ps) == ("c", 64) else 2)
             for s, ps, p, w in GRID]
    report = compare_rows(after, build(before, "cpu", "c0")[0])
    assert len([f for f in report.findings if f.verdict != "ok"]) == 27 + 6
    assert report.direction == "regressed" and report.regressed
    lines = rollup_lines(report.findings, report.configs)
    assert lines[1:] == [
        "  peak_reserved_slots regressed +50.0% in 27 configs: spec=dflash, block_size=16",
        "  leaked_pages improved -50.0% in 6 configs: page_size=64, profile=c",
    ]
    assert "peak_reserved_slots regressed +50.0% in 27 configs" in report.table()


def test_a_filtered_run_still_names_what_its_moved_configs_share_and_no_all_clauses():
    """A sweep filtered to DFLASH has no spec axis of its own; against the baseline of
    the whole suite its roll-up says spec=dflash, not a list of "all X"."""
    before = [_row(s, ps, p, w, 384 if s == "dflash" else 100) for s, ps, p, w in GRID]
    after = [_row(s, ps, p, w, 576, leaked=0) for s, ps, p, w in GRID if s == "dflash"]
    report = compare_rows(after, build(before, "cpu", "c0")[0], selected=lambda tid: "spec=dflash" in tid)
    assert rollup_lines(report.findings, report.configs)[1:] == [
        "  peak_reserved_slots regressed +50.0% in 27 configs: spec=dflash, block_size=16"]
    assert "all " not in report.table()


def test_an_improvement_alone_is_labelled_so_and_still_gates():
    before = [_row("dflash", 16, "a", None, 384, leaked=12)]
    after = [_row("dflash", 16, "a", None, 384, leaked=11)]
    report = compare_rows(after, build(before, "cpu", "c0")[0])
    assert [(f.metric, f.verdict, f.change) for f in report.gating] == [("leaked_pages", "improvement", "-1 (-8.3%)")]
    assert report.direction == "improved" and report.regressed  # counters gate exactly
    assert "0 regressions, 1 improvements" in report.summary()
    clean = compare_rows(before, build(before, "cpu", "c0")[0])
    assert clean.direction == "clean" and not clean.regressed
