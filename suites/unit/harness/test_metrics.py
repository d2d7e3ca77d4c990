"""The declared metric schema: every figure a real run emits is declared, and nothing is guessed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.core.metric_kinds import higher_is_better, kind
from harness.core.metrics import (GROUPS, HEADLINE, HEADLINE_SECTION, INVARIANTS, KINDS, METRICS, SERIES, SWEEP_HEADLINE,
                                  UnknownMetric, lookup, undeclared)

ROOT = Path(__file__).resolve().parents[3]
BASELINES = ROOT / "results" / "baselines"
FIXTURES = ROOT / "suites" / "unit" / "ci" / "fixtures"

# Small configs that reach every part of the engine: both algorithms, SWA with its
# own pool, PD arrivals, memory pressure (retractions), the dedup free (syncs).
CONFIGS = [
    {"spec": "dflash", "block_size": 4, "page_size": 16, "policy": "unaligned", "window": 32, "layer_pattern": "1:1",
     "num_requests": 4, "input_len": 40, "output_len": 24, "min_len": 8},
    {"spec": "eagle", "topk": 4, "steps": 3, "num_draft_tokens": 8, "page_size": 16, "free_policy": "dedup",
     "num_requests": 4, "input_len": 40, "output_len": 24, "min_len": 8},
    {"spec": "dflash", "block_size": 16, "page_size": 16, "workload": "pd", "window": 32, "layer_pattern": "1:1",
     "num_requests": 4, "input_len": 64, "output_len": 24, "min_len": 8},
    {"spec": "dflash", "block_size": 16, "page_size": 16, "pool_tokens": 512, "num_requests": 8,
     "input_len": 96, "output_len": 48, "min_len": 16},
]


@pytest.mark.parametrize("config", CONFIGS, ids=["swa", "eagle-dedup", "pd", "pressure"])
def test_every_metric_a_real_run_emits_is_declared(config):
    from harness.grid.execute import run_once

    row = run_once(config)
    assert row["status"] != "failed", row.get("error")
    assert row["metrics"] and row["series"]
    assert undeclared(row) == []
    for name in row["metrics"]:
        assert kind(name) in KINDS


def test_every_baseline_figure_is_declared():
    # compare looks every baselined name up: one the schema lost would stop it.
    for path in BASELINES.glob("*.json"):
        for entry in json.loads(path.read_text())["configs"].values():
            for name in [*entry["counters"], *entry["timings"]]:
                assert lookup(name).kind in (("counter",) if name in entry["counters"] else ("timing", "memory"))
    # An older baseline kept a retired RSS figure as a timing: declared, no longer gated.
    old = json.loads((FIXTURES / "baseline_cpu.json").read_text())
    for entry in old["configs"].values():
        for name in [*entry["counters"], *entry["timings"]]:
            lookup(name)


def test_every_figure_of_the_recorded_nights_is_declared():
    # Rows written by older versions (a retired RSS figure) are still compared and triaged.
    nights = sorted((FIXTURES / "nights").glob("*/results.jsonl"))
    assert nights
    for path in nights:
        for line in path.read_text().splitlines():
            assert undeclared(json.loads(line)) == [], path


def test_an_undeclared_name_is_an_error_not_a_guess():
    with pytest.raises(UnknownMetric, match="'peak_page_count' is not declared"):
        kind("peak_page_count")  # the old guess made any name with "page" an exact counter
    with pytest.raises(UnknownMetric):
        higher_is_better("violations.K99")
    assert undeclared({"metrics": {"steps": 1, "bogus_s": 2.0}, "series": {"held": [1], "odd": [2]}}) == [
        "bogus_s", "series.odd"]


def test_kinds_and_directions_are_the_gates_compare_used():
    assert kind("peak_pages_held") == kind("violations.K4") == kind("syncs_per_step") == "counter"
    assert kind("output_tokens_per_s") == kind("wall_s") == kind("plan_us_per_decode_step") == "timing"
    assert kind("mem_torch_peak_bytes") == "memory"
    # Process- and device-wide bytes follow test order: reported, never gated.
    assert kind("rss_peak_bytes") == kind("mem_rss_bytes") == kind("mem_nvml_used_bytes") == "info"
    assert higher_is_better("output_tokens_per_s") and not higher_is_better("plan_us_per_decode_step")


def test_mlflow_names_are_grouped_unique_and_valid():
    from mlflow.utils.validation import validate_param_and_metric_name

    names = [m.mlflow_name for m in [*METRICS.values(), *SERIES.values()]]
    assert len(set(names)) == len(names)
    assert all(validate_param_and_metric_name(n) and n.split("/")[0] in (*GROUPS, HEADLINE_SECTION) for n in names)
    assert lookup("peak_pages_held").mlflow_name == "memory/peak_pages_held"
    assert lookup("peak_tokens_held").mlflow_name == "at a glance/peak_tokens_held"
    assert lookup("peak_tokens_held").group_name == "memory/peak_tokens_held"  # the parent's aggregates' stem
    assert lookup("violations.K1").mlflow_name == "invariants/K1"
    assert SERIES["held"].mlflow_name == "memory/series/held"
    assert {f"violations.{k}" for k in INVARIANTS} <= set(METRICS)
    for m in METRICS.values():
        assert m.help and m.unit and (m.kind in ("timing", "memory") or not m.is_rate)


def test_the_headline_section_sorts_before_every_group_as_mlflow_orders_sections():
    """MLflow 3.17 orders a run's chart sections by name, with a plain sort on first load and
    a locale compare when new metrics arrive: the headline must come first under both (a config
    run opened on engine/ counters of zeros)."""
    sections = {n.rsplit("/", 1)[0] for n in (m.mlflow_name for m in [*METRICS.values(), *SERIES.values()])}
    sections |= {"sweep", "system"}  # the parent's verdict counts, MLflow's system metrics
    assert sorted(sections)[0] == HEADLINE_SECTION
    assert sorted(sections, key=str.casefold)[0] == HEADLINE_SECTION
    assert {n.rsplit("/", 1)[0] for n in (lookup(h).mlflow_name for h in HEADLINE)} == {HEADLINE_SECTION}
    assert {lookup(h).unit for h in HEADLINE} == {"tokens", "slots"}


def test_the_parent_headline_names_are_valid_and_say_their_unit():
    """A parent's `at a glance` cards are titled by the name after the section: each says its unit."""
    from mlflow.utils.validation import validate_param_and_metric_name

    for name, unit, help in SWEEP_HEADLINE:
        assert validate_param_and_metric_name(f"{HEADLINE_SECTION}/{name}") and unit in name and help, name
    assert len(SWEEP_HEADLINE) <= 5  # a first screen, not another wall of charts


def test_the_profiles_new_figures_are_declared_as_counters():
    for name in ("peak_swa_pages_held", "swa_retractions", "row_overflow_slots", "peak_stranded_slots_spec",
                 "peak_stranded_slots_pd"):
        assert kind(name) == "counter" and lookup(name).group in ("swa", "memory")
    assert SERIES["swa_held"].group == "swa"
