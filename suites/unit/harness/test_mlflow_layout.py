"""The MLflow layout a dashboard reads: grouped names, tags on every run, measured
times, the parent's aggregates and its closing, the runs view URL."""

from __future__ import annotations

import pytest

from harness.core.metrics import SWEEP_HEADLINE, UnknownMetric
from harness.store.results import RunDir, append_row
from harness.view import mlflow_layout as layout
from harness.view.mlflow_log import client, ensure_experiment, ensure_parent, finish_parent, log_row


def row(ps=16, policy="aligned", window=None, model="none", tps=100.0, held=10, leaked=0, verdict="ok", **over):
    r = {"key": f"ps={ps},policy={policy},win={window},model={model}", "test_id": f"ps:{ps}-{policy}-{window}-{model}",
         "config": {"spec": "dflash", "block_size": 16, "page_size": ps, "policy": policy, "window": window,
                    "model": model},
         "metrics": {"steps": 7, "peak_pages_held": held, "peak_stranded_slots": 0 if policy == "aligned" else 11,
                     "leaked_pages": leaked, "output_tokens_per_s": tps, "wall_s": 0.5,
                     "peak_tokens_held": held * ps, "leaked_tokens": leaked * ps},
         "series": {"held": [1, 2, 3], "stranded": [0, 5, 0]}, "violations": {"K1": 2} if policy == "unaligned" else {},
         "status": "ok", "verdict": verdict, "started_at": 1_700_000_000.0, "finished_at": 1_700_000_002.5,
         "repeat": 4}
    r.update(over)
    return r


def test_names_are_grouped_and_timings_carry_their_spread():
    r = row(samples={"output_tokens_per_s": [90.0, 100.0, 110.0, 140.0], "wall_s": [0.4, 0.5, 0.6, 0.7]}, repeat=4)
    names = layout.scalar_metrics(r)
    assert names["memory/peak_pages_held"] == 10 and names["engine/steps"] == 7
    assert names["throughput/output_tokens_per_s"] == 100.0
    assert names["throughput/output_tokens_per_s.iqr"] == pytest.approx(117.5 - 97.5)
    assert names["timing/wall_s.iqr"] == pytest.approx(0.625 - 0.475)
    assert layout.scalar_metrics(row(policy="unaligned"))["invariants/K1"] == 2
    assert {k for k, _, _ in layout.series_metrics(r)} == {"memory/series/held", "memory/series/stranded"}
    with pytest.raises(UnknownMetric):
        layout.scalar_metrics(row(metrics={"mystery_pages": 1}))


def test_a_config_run_logs_its_headline_figures_and_verdict_first():
    """MLflow's compare-runs view starts on the first metric a run logged (it defaulted to
    engine/aborted_requests); the run's first chart section is these, with their units."""
    names = list(layout.scalar_metrics(row(held=3, leaked=1)))
    assert names[:4] == ["at a glance/peak_tokens_held", "at a glance/peak_stranded_slots",
                         "at a glance/leaked_tokens", "at a glance/verdict_pass"]
    assert len(names) == len(set(names)) and "memory/peak_tokens_held" not in names
    assert layout.scalar_metrics(row(held=3, leaked=1))["at a glance/leaked_tokens"] == 16
    for verdict, passed in (("ok", 1), ("as_expected", 1), ("unexpected", 0), ("failed", 0)):
        assert layout.scalar_metrics(row(verdict=verdict))["at a glance/verdict_pass"] == passed
    assert "at a glance/verdict_pass" not in layout.scalar_metrics(row(verdict=None))
    assert "| `at a glance/verdict_pass` | 1 = pass |" in layout.schema_note()


def test_tags_say_what_a_config_ran_and_what_its_throughput_means():
    tags = layout.config_tags(row(model="none"))
    assert tags["profile"] == "aligned" and "bookkeeping speed" in tags["throughput_meaning"]
    assert "bookkeeping speed" in tags["mlflow.note.content"]
    tiny = layout.config_tags(row(model="tiny", config={"profile": "sglang-0.5.23", "policy": "aligned", "model": "tiny"}))
    assert tiny["profile"] == "sglang-0.5.23" and tiny["throughput_meaning"] == "serving speed of model tiny"
    ctx = layout.context_tags({"suite": "s", "git_commit": "abc", "hardware": {"profile": "h100", "gpu_name": "NVIDIA H100"}})
    assert ctx["commit"] == ctx["mlflow.source.git.commit"] == "abc" and ctx["hardware_profile"] == "h100"
    assert set(ctx) == set(layout.CONTEXT_TAGS) and ctx["kvbench_version"]


def test_the_parent_aggregates_per_axis_value_and_leaves_failed_configs_out():
    rows = [row(ps=16, held=10, tps=100.0), row(ps=16, policy="unaligned", held=12, leaked=3, tps=300.0),
            row(ps=64, held=4, window=64, tps=50.0), row(ps=64, model="tiny", tps=7.0, held=2),
            row(ps=64, status="failed", verdict="failed", held=999)]
    agg = layout.sweep_aggregates(rows)
    # memory in token slots: 12 pages of 16 at ps 16, 4 pages of 64 at ps 64 (pages would say 12 > 4)
    assert agg["memory/peak_tokens_held.max/page_size_16"] == 192 and agg["memory/peak_tokens_held.max/page_size_64"] == 256
    assert agg["memory/leaked_tokens.sum/all"] == 48 and agg["memory/peak_stranded_slots.max/window_none"] == 11
    assert agg["throughput/output_tokens_per_s.median.model_none/page_size_16"] == 200.0
    assert agg["throughput/output_tokens_per_s.median.model_tiny/all"] == 7.0  # models never fold together
    # a single sample is not a trend: a config timed once joins no throughput aggregate
    once = layout.sweep_aggregates([row(ps=16, tps=5.0, repeat=1), row(ps=64, tps=9.0)])
    assert "throughput/output_tokens_per_s.median.model_none/page_size_16" not in once
    assert once["throughput/output_tokens_per_s.median.model_none/all"] == 9.0
    assert layout.config_tags(row(repeat=1))["kvbench.timings"] == "single sample"
    assert layout.config_tags(row())["kvbench.timings"] == "median of 4 runs"
    assert agg["memory/peak_tokens_held.max/window_64"] == 256 and "memory/peak_tokens_held.max/window_none" in agg
    assert layout.parent_status(rows[:2]) == "FINISHED"
    assert layout.parent_status(rows) == "FAILED" and layout.parent_status([]) == "FAILED"
    assert layout.verdict_metrics(rows)["sweep/verdict_failed"] == 1
    assert not any(k.startswith("invariants/") for k in layout.verdict_metrics(rows))  # not a clean night's first chart


def test_the_parent_headline_duplicates_the_nights_figures_a_reader_wants_first():
    """A parent opened on `memory/leaked_tokens.sum`, one chart of 0 per axis value: its own
    `at a glance` section holds the night's verdict and peaks, the same figures as its
    verdict counts and /all aggregates (which keep their names: nights chart as a trend)."""
    rows = [row(ps=16, held=10), row(ps=16, policy="unaligned", held=12, leaked=3, verdict="unexpected"),
            row(ps=64, held=4, verdict="as_expected", metrics={"violations": 60, "peak_tokens_held": 256}),
            row(ps=64, status="failed", verdict="failed", held=999, leaked=50)]
    rows[1]["metrics"]["violations"] = 2
    head = layout.sweep_headline(rows)
    assert head == {"at a glance/configs_unexpected": 2, "at a glance/violations_unexpected": 2,
                    "at a glance/leaked_tokens.sum": 48, "at a glance/peak_tokens_held.max": 256,
                    "at a glance/peak_stranded_slots.max": 11}
    agg, counts = layout.sweep_aggregates(rows), layout.verdict_metrics(rows)
    assert head["at a glance/peak_tokens_held.max"] == agg["memory/peak_tokens_held.max/all"]
    assert head["at a glance/leaked_tokens.sum"] == agg["memory/leaked_tokens.sum/all"]
    assert head["at a glance/violations_unexpected"] == counts["sweep/violations_unexpected"]
    # every config failed: the counts stand, no fold of nothing is charted as 0
    assert layout.sweep_headline(rows[3:]) == {"at a glance/configs_unexpected": 1,
                                               "at a glance/violations_unexpected": 0}
    note = layout.schema_note()
    assert all(f"| `at a glance/{n}` | {unit} | sweep |" in note for n, unit, _ in SWEEP_HEADLINE)


def test_runs_carry_the_sweep_context_and_their_measured_times(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cl = client(uri)
    exp = ensure_experiment(cl, "kvbench-unit", uri, tmp_path)
    assert cl.get_experiment(exp).tags["mlflow.experimentKind"] == "custom_model_development"
    meta = {"suite": "unit", "git_commit": "c0ffee", "hardware": {"profile": "cpu"}, "created": 1_699_999_999.0}
    parent = ensure_parent(cl, exp, "x", meta)
    rows = [row(), row(policy="unaligned", verdict="unexpected")]
    for r in rows:
        assert log_row(cl, exp, parent, "x", r, r["test_id"])
    kids = cl.search_runs([exp], filter_string="tags.hardware_profile = 'cpu' and tags.`kvbench.role` = 'config'")
    assert len(kids) == 2
    kid = next(k for k in kids if k.data.tags["profile"] == "unaligned")
    assert (kid.info.start_time, kid.info.end_time) == (1_700_000_000_000, 1_700_000_002_500)
    assert kid.data.tags["mlflow.source.git.commit"] == "c0ffee" and kid.data.tags["suite"] == "unit"
    assert kid.data.metrics["invariants/K1"] == 2 and kid.data.metrics["at a glance/peak_stranded_slots"] == 11
    # MLflow's compare-runs view starts on the first metric the store returns: the headline
    assert list(kid.data.metrics)[:4] == ["at a glance/peak_tokens_held", "at a glance/peak_stranded_slots",
                                          "at a glance/leaked_tokens", "at a glance/verdict_pass"]
    assert kid.data.metrics["at a glance/verdict_pass"] == 0  # unexpected

    plot = tmp_path / "a.png"
    plot.write_bytes(b"\x89PNG\r\n")
    assert finish_parent(uri, parent, rows, [plot]) == "FAILED"  # one config not as expected
    run = cl.get_run(parent)
    assert run.info.status == "FAILED" and run.info.end_time == 1_700_000_002_500
    assert run.info.start_time == 1_699_999_999_000
    assert run.data.metrics["memory/peak_tokens_held.max/page_size_16"] == 160
    assert run.data.metrics["sweep/verdict_unexpected"] == 1 and run.data.tags["profile"] == "aligned,unaligned"
    # The parent opens on its own headline, logged first; its aggregates keep their names.
    assert list(run.data.metrics)[:5] == [f"at a glance/{n}" for n, _, _ in SWEEP_HEADLINE]
    assert run.data.metrics["at a glance/configs_unexpected"] == 1
    assert [a.path for a in cl.list_artifacts(parent, "plots")] == ["plots/a.png"]
    legend = cl.download_artifacts(parent, "metrics.md", str(tmp_path))
    assert "| `throughput/output_tokens_per_s` | tokens/s | timing |" in open(legend).read()
    assert "bookkeeping speed" in open(legend).read()


def test_sync_closes_the_parent_with_its_plots(results_root, cli, capsys):
    uri = f"sqlite:///{results_root / 'mlflow.db'}"
    run = RunDir(results_root / "runs" / "r1")
    run.path.mkdir(parents=True)
    run.write_meta({"suite": "unit", "mlflow_uri": uri, "hardware": {"profile": "cpu"}, "git_commit": "abc"})
    # Two page sizes of one policy: a line of two points (a panel of single points is not drawn).
    rows = [row(ps=16), row(ps=64), row(ps=64, policy="unaligned", verdict="as_expected")]
    for r in rows:
        append_row(run.results, r)
    assert cli("sync", "r1") == 0
    out = capsys.readouterr().out
    assert "3 uploaded, 0 already there" in out and "FINISHED" in out
    cl = client(uri)
    parent = cl.get_run(run.meta()["mlflow_parent"])
    assert parent.info.status == "FINISHED"
    names = {a.path for a in cl.list_artifacts(parent.info.run_id, "plots")}
    assert "plots/memory_vs_page_size.png" in names  # drawn by sync: the sweep never did
    assert (run.path / "plots" / "memory_vs_page_size.png").exists()


def test_ui_names_the_runs_view_of_each_experiment(tmp_path):
    from harness.commands.ui import runs_urls

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cl = client(uri)
    exp = ensure_experiment(cl, "kvbench-smoke", uri, tmp_path)
    cl.create_experiment("someone-else")
    from harness.view.mlflow_views import SHARE_TAG, runs_query, view_tags

    assert runs_urls("http://h:1", uri) == [("kvbench-smoke", f"http://h:1/#/experiments/{exp}/runs?{runs_query()}")]
    assert runs_query().startswith("workflowType=machine_learning&viewStateShareKey=kvbench-")
    # the view the link names is on the experiment; an older kvbench view is taken off
    cl.set_experiment_tag(exp, SHARE_TAG + "kvbench-0000", "{}")
    runs_urls("http://h:1", uri)
    tags = cl.get_experiment(exp).tags
    assert {k: v for k, v in tags.items() if k.startswith(SHARE_TAG)} == view_tags()


def test_system_metrics_are_sampled_on_the_parent_until_it_is_closed(tmp_path, monkeypatch):
    import time

    from harness.view.mlflow_log import start_system_metrics

    monkeypatch.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "0.2")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cl = client(uri)
    exp = ensure_experiment(cl, "kvbench-unit", uri, tmp_path)
    parent = ensure_parent(cl, exp, "x", {"suite": "unit"})
    start_system_metrics(uri, parent)
    end = time.monotonic() + 60
    while "system/cpu_utilization_percentage" not in cl.get_run(parent).data.metrics:
        assert time.monotonic() < end, "no system metric was logged in 60 s"
        time.sleep(0.2)
    assert finish_parent(uri, parent, [row()], []) == "FINISHED"
    assert "system/system_memory_usage_megabytes" in cl.get_run(parent).data.metrics


def test_the_parent_splits_violations_into_expected_and_unexpected():
    rows = [{"status": "violated", "verdict": "as_expected", "metrics": {"violations": 60}},
            {"status": "violated", "verdict": "unexpected", "metrics": {"violations": 2}},
            {"status": "failed", "verdict": "failed", "metrics": {"violations": 5}}]  # measured nothing
    counts = layout.verdict_metrics(rows)
    assert counts["sweep/violations_expected"] == 60 and counts["sweep/violations_unexpected"] == 2
