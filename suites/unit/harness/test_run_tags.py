"""Who made a run: every parent and config run carries the runner, GPU count, trigger,
CI run and PR (harness/core/run_tags.py), and a pull request's rerun logs to the
suite's PR experiment, never the nightly one."""

from __future__ import annotations

import pytest

from harness.core.errors import UsageError
from harness.core.run_tags import NAMES, ci_context, experiment_suffix, run_tags
from harness.view import mlflow_layout as layout
from harness.view.mlflow_log import client, experiment_name

from test_sweep_e2e import SUITE

GITHUB = {"GITHUB_SERVER_URL": "https://github.example", "GITHUB_REPOSITORY": "org/kvbench", "GITHUB_RUN_ID": "42"}


@pytest.mark.parametrize("env, want", [
    ({}, "local"),
    ({"GITHUB_EVENT_NAME": "schedule"}, "schedule"),
    ({"GITHUB_EVENT_NAME": "workflow_dispatch"}, "dispatch"),
    ({"GITHUB_EVENT_NAME": "workflow_dispatch", "KVBENCH_PR": "17"}, "pr-rerun"),
    ({"GITHUB_EVENT_NAME": "pull_request"}, "pull_request"),
    ({"GITHUB_EVENT_NAME": "a b;c"}, "local"),
])
def test_trigger_is_read_from_the_event_and_the_bots_pr(env, want):
    assert ci_context(env)["trigger"] == want


def test_ci_run_url_and_runner_come_from_the_workflow_env():
    ctx = ci_context({**GITHUB, "RUNNER_LABEL": "8-gpu-h200", "GITHUB_EVENT_NAME": "schedule"})
    assert ctx == {"runner": "8-gpu-h200", "trigger": "schedule", "pr": "none",
                   "ci_run_url": "https://github.example/org/kvbench/actions/runs/42"}
    assert ci_context({"GITHUB_REPOSITORY": "org/kvbench"})["ci_run_url"] == "none"  # no run id: not a CI run
    assert ci_context({"GITHUB_REPOSITORY": "org/kvbench", "GITHUB_RUN_ID": "7"})["ci_run_url"].startswith(
        "https://github.com/org/kvbench/")


@pytest.mark.parametrize("env, word", [({"KVBENCH_PR": "abc"}, "KVBENCH_PR"), ({"KVBENCH_PR": "-3"}, "KVBENCH_PR"),
                                       ({"RUNNER_LABEL": "gpu; rm"}, "RUNNER_LABEL")])
def test_a_malformed_variable_is_one_line_naming_it(env, word):
    with pytest.raises(UsageError, match=word) as err:
        ci_context(env)
    assert "\n" not in str(err.value)


def test_every_declared_tag_is_a_context_tag_with_a_value():
    meta = {"suite": "s", "hardware": {"profile": "h200", "gpu_name": "NVIDIA H200", "gpu_count": 8},
            "ci": ci_context({**GITHUB, "RUNNER_LABEL": "8-gpu-h200", "KVBENCH_PR": "5"})}
    ctx = layout.context_tags(meta)
    assert set(NAMES) <= set(layout.CONTEXT_TAGS) and set(ctx) == set(layout.CONTEXT_TAGS)
    assert (ctx["runner"], ctx["gpu_count"], ctx["trigger"], ctx["pr"]) == ("8-gpu-h200", "8", "pr-rerun", "5")
    assert experiment_suffix(meta) == "-pr"
    old = run_tags({"suite": "s"})  # a run set up before the tags existed
    assert old == {"runner": "local", "gpu_count": "0", "trigger": "local", "ci_run_url": "none", "pr": "none"}


@pytest.mark.slow
def test_a_pr_rerun_sweep_tags_every_run_and_logs_to_the_pr_experiment(results_root, tmp_path, cli, monkeypatch,
                                                                         capsys):
    suite = tmp_path / "tags.toml"
    suite.write_text(SUITE.replace('name = "e2e"', 'name = "tags"').replace("seed = [1, 2]", "seed = [1]"))
    for k, v in {**GITHUB, "RUNNER_LABEL": "1-gpu-h100", "GITHUB_EVENT_NAME": "workflow_dispatch",
                 "KVBENCH_PR": "23"}.items():
        monkeypatch.setenv(k, v)
    uri = f"sqlite:///{results_root / 'mlflow.db'}"
    assert cli("sweep", suite, "--run-id", "pr1", "-j", "1", "--filter", "ps:16", "--mlflow-uri", uri) == 0, \
        capsys.readouterr().out
    cl = client(uri)
    assert cl.get_experiment_by_name(experiment_name("tags")) is None  # the nightly experiment is untouched
    exp = cl.get_experiment_by_name(experiment_name("tags", "-pr"))
    runs = cl.search_runs([exp.experiment_id], filter_string="tags.`kvbench.run` = 'pr1'")
    assert sorted(r.data.tags["kvbench.role"] for r in runs) == ["config", "config", "parent"]
    for r in runs:
        t = r.data.tags
        assert (t["runner"], t["trigger"], t["pr"], t["gpu_count"]) == ("1-gpu-h100", "pr-rerun", "23", "0")
        assert t["ci_run_url"] == "https://github.example/org/kvbench/actions/runs/42"


def test_a_malformed_pr_number_stops_the_sweep_before_it_runs(results_root, tmp_path, cli, monkeypatch, capsys):
    suite = tmp_path / "tags.toml"
    suite.write_text(SUITE.replace('name = "e2e"', 'name = "tags"'))
    monkeypatch.setenv("KVBENCH_PR", "twelve")
    assert cli("sweep", suite, "--run-id", "bad", "--no-mlflow") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "KVBENCH_PR" in err[0]
    assert not (results_root / "runs" / "bad" / "results.jsonl").exists()


def test_a_sharded_night_keeps_who_made_it_through_the_merge(tmp_path):
    """Shards run `kvbench sweep --shard` (each records the CI context); the merged night,
    which `kvbench sync` logs, carries it, so its MLflow runs are tagged as one sweep's."""
    from harness.store.merge import merge
    from harness.store.results import RunDir

    from test_merge import _shard

    ci = ci_context({**GITHUB, "RUNNER_LABEL": "8-gpu-h200", "GITHUB_EVENT_NAME": "schedule"})
    paths = [_shard(tmp_path, i, ci=ci, hardware={"profile": "h200", "gpu_count": 8}) for i in (1, 2, 3)]
    run_dir, _ = merge(paths, "night-7", tmp_path / "results")
    tags = run_tags(RunDir(run_dir.path).meta())
    assert (tags["runner"], tags["trigger"], tags["gpu_count"]) == ("8-gpu-h200", "schedule", "8")
    assert tags["ci_run_url"] == "https://github.example/org/kvbench/actions/runs/42"
