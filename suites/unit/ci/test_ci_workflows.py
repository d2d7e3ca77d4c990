"""The workflows: GitHub's schema (check-jsonschema), then what the schema cannot see."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.ci import workflows
from harness.ci.runners import load_registry
from harness.commands.ci import lint, parse_cli

REPO = Path(__file__).resolve().parents[3]
WORKFLOWS = sorted((REPO / "ci" / "workflows").glob("*.yml"))
CHECK = Path(sys.executable).parent / "check-jsonschema"


def _schema(*files: Path) -> subprocess.CompletedProcess:
    return subprocess.run([CHECK, "--builtin-schema", "vendor.github-workflows", *files],
                          capture_output=True, text=True, timeout=300)


def test_workflow_files_present():
    assert {p.name for p in WORKFLOWS} >= {"pr-cpu.yml", "nightly-gpu.yml", "bot.yml", "rerun-test.yml"}


def test_workflows_match_github_schema(tmp_path):
    out = _schema(*WORKFLOWS)
    assert out.returncode == 0, out.stdout + out.stderr
    # ...and the schema check can fail: a job without runs-on is not a workflow.
    broken = tmp_path / "broken.yml"
    broken.write_text("name: x\non: push\njobs:\n  a:\n    steps:\n      - run: echo\n")
    assert _schema(broken).returncode != 0


def test_repository_lint_is_clean():
    assert lint(REPO) == []


def _tree_with(tmp_path: Path, name: str, text: str) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(REPO / "ci", root / "ci")
    (root / "suites").mkdir()
    (root / "ci" / "workflows" / name).write_text(text)
    return root


BAD = """
name: bad
on:
  workflow_dispatch:
    inputs:
      runner: {type: choice, options: [cpu, 1-gpu-h100, 3-gpu-v100]}
jobs:
  a:
    runs-on: 2-gpu-a100
    steps:
      - run: echo "${{ github.event.comment.body }}"
      - run: |
          kvbench sweeep smoke
          kvbench compare "results/runs/$RUN_ID" --no-such-option
          kvbench ci triage --nights a b --baseline x.json --github "$REPO" | tee out.txt
  b:
    runs-on: ${{ inputs.runner }}
    steps:
      - run: kvbench bot report --comment-id "$ID" --group "$G" --status running
  c:
    runs-on: ${{ matrix.runner }}
    strategy:
      matrix:
        include:
          - {runner: 1-gpu-h200, profile: h100}
    steps:
      - run: echo ok
"""


def test_lint_finds_each_kind_of_problem(tmp_path):
    root = _tree_with(tmp_path, "bad.yml", BAD)
    problems = [p for p in lint(root) if p.startswith("bad.yml")]
    text = "\n".join(problems)
    assert "job a: runs-on resolves to '2-gpu-a100'" in text
    assert "job a: a run: script contains ${{ }}" in text
    assert "`kvbench sweeep smoke` is not a valid kvbench command" in text
    assert "--no-such-option` is not a valid kvbench command" in text
    assert "triage" not in text  # a valid command, piped: parsed up to the pipe
    assert "job b: runs-on resolves to 'cpu'" in text  # cpu is a label, its machine is ubuntu-latest
    assert "inputs.runner='3-gpu-v100' is not a label" in text
    assert "bot report" not in text
    assert "matrix profile 'h100' for 1-gpu-h200 but ci/runners.toml says 'h200'" in text
    assert "input runner offers '3-gpu-v100'" in text  # the choice itself, wherever it is used
    assert len(problems) == 10, text


def test_expression_evaluator():
    expr = "inputs.runner == 'cpu' && 'ubuntu-latest' || inputs.runner"
    assert workflows.evaluate(expr, {"inputs.runner": "cpu"}) == "ubuntu-latest"
    assert workflows.evaluate(expr, {"inputs.runner": "8-gpu-h200"}) == "8-gpu-h200"
    assert workflows.evaluate("!(matrix.a == 'x') && 'y'", {"matrix.a": "x"}) is False
    with pytest.raises(ValueError):
        workflows.evaluate("github.event.comment.body", {})


def test_every_runs_on_resolution_is_a_registry_machine():
    registry = load_registry(REPO / "ci" / "runners.toml")
    nightly = workflows.load(REPO / "ci" / "workflows" / "nightly-gpu.yml")
    matrix = nightly["jobs"]["nightly"]["strategy"]["matrix"]["include"]
    gpu_labels = {r.label for r in registry.runners.values() if r.gpus}
    assert {m["runner"] for m in matrix} == gpu_labels  # one nightly job per GPU label
    rerun = workflows.load(REPO / "ci" / "workflows" / "rerun-test.yml")
    options = rerun["on"]["workflow_dispatch"]["inputs"]["runner"]["options"]
    assert options == list(registry.labels)  # the bot may dispatch to any label


def test_no_event_text_in_scripts():
    for path in WORKFLOWS:
        for job, script in workflows.scripts(workflows.load(path)):
            assert "${{" not in script, (path.name, job)
            assert "comment.body" not in script


def test_kvbench_commands_are_found_and_real():
    found = []
    for path in WORKFLOWS:
        for _, script in workflows.scripts(workflows.load(path)):
            found += workflows.kvbench_commands(script)
    names = {tuple(argv[:2]) for argv in found}
    assert {("sweep", "nightly-gpu"), ("ci", "triage"), ("bot", "handle"), ("bot", "report"),
            ("ci", "rerun-args"), ("ci", "lint")} <= names
    assert ("compare", "results/runs/$RUN_ID") in names
    with pytest.raises(SystemExit):
        parse_cli(["ci"])  # a group without its subcommand does nothing, so it does not count


def test_yaml_on_key_is_read():
    data = workflows.load(REPO / "ci" / "workflows" / "bot.yml")
    assert "issue_comment" in data["on"] and True not in data
    assert yaml.safe_load("on: push") == {True: "push"}  # why load() renames it


def _checkouts(workflow: dict, job: str) -> list[dict]:
    return [step.get("with") or {} for step in workflow["jobs"][job]["steps"]
            if str(step.get("uses", "")).startswith("actions/checkout@")]


def test_pull_request_code_is_the_commit_the_bot_validated():
    """The bot validates one commit; a later push to the pull request must not be what
    runs: rerun-test checks out the dispatched sha, never the moving refs/pull/N/head."""
    bot = workflows.load(REPO / "ci" / "workflows" / "bot.yml")
    steps = bot["jobs"]["handle"]["steps"]
    pr_step = next(s for s in steps if (s.get("with") or {}).get("path") == "pr-tree")
    handle = next(s for s in steps if "kvbench bot handle" in str(s.get("run", "")))
    assert handle["env"]["HEAD_SHA"] == "${{ steps.%s.outputs.commit }}" % pr_step["id"]
    assert '--head-sha "$HEAD_SHA"' in handle["run"]
    rerun = workflows.load(REPO / "ci" / "workflows" / "rerun-test.yml")
    assert rerun["on"]["workflow_dispatch"]["inputs"]["sha"]["required"] is True
    assert "refs/pull/" not in (REPO / "ci" / "workflows" / "rerun-test.yml").read_text()
    for job in ("start", "run"):
        assert [w["ref"] for w in _checkouts(rerun, job) if "ref" in w] == ["${{ inputs.sha }}"], job
    assert '--sha "$SHA"' in next(s["run"] for s in rerun["jobs"]["start"]["steps"] if s.get("id") == "args")


def _step(workflow: str, job: str, name: str) -> dict:
    data = workflows.load(REPO / "ci" / "workflows" / workflow)
    return next(s for s in data["jobs"][job]["steps"] if s.get("name") == name)


def _bash(script: str, cwd: Path, env: dict) -> None:
    # The shell GitHub runs a bash step with.
    subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script], cwd=cwd,
                   env={"PATH": f"{cwd}/bin:/usr/bin:/bin", **env}, check=True, timeout=60)


def test_nights_come_from_scheduled_runs_and_a_rerun_attempt_is_the_same_night(tmp_path):
    """The history is the night artifacts of finished scheduled runs (a fake gh lists
    them); the run in progress is never among them, so a rerun attempt of a night adds
    it once; a name with a space (or anything not a run id) deletes nothing."""
    from harness.ci.triage import history

    restore = _step("nightly-gpu.yml", "nightly", "Restore the last nights")
    assert "--event schedule" in restore["run"] and "--branch \"$DEFAULT_BRANCH\"" in restore["run"]
    keep = _step("nightly-gpu.yml", "merge", "Keep this night")["run"]
    assert "xargs" not in (REPO / "ci" / "workflows" / "nightly-gpu.yml").read_text()
    (tmp_path / "bin").mkdir()
    gh = tmp_path / "bin" / "gh"
    # `gh run list` prints the ids; `gh run download ID --name N --dir D` unpacks a night into D.
    gh.write_text("#!/bin/bash\nif [ \"$2\" = list ]; then printf '%s\\n' 903 902 '000000000000 .venv' 901; exit 0; fi\n"
                  "id=$3; dir=${@: -1}; [ \"$id\" = 902 ] && exit 1\n"
                  "mkdir -p \"$dir\" && echo \"{\\\"night\\\": $id}\" > \"$dir/results.jsonl\"\n")
    gh.chmod(0o755)
    (tmp_path / ".venv").mkdir()
    env = {"RUNNER_LABEL": "1-gpu-h100", "GITHUB_REPOSITORY": "o/r", "DEFAULT_BRANCH": "main"}
    for attempt in (1, 2):
        shutil.rmtree(tmp_path / "nights", ignore_errors=True)  # a fresh job: no nights but the restored ones
        run_id = f"nightly-1-gpu-h100-904-{attempt}"
        out = tmp_path / "results" / "runs" / run_id
        out.mkdir(parents=True)
        (out / "results.jsonl").write_text(f'{{"attempt": {attempt}}}\n')
        _bash(restore["run"], tmp_path, {**env, "GITHUB_RUN_ID": "904"})
        _bash(keep, tmp_path, {**env, "GITHUB_RUN_ID": "904", "RUN_ID": run_id})
        kept = history(tmp_path / "nights")
        assert [p.name[:12] for p in kept] == ["000000000901", "000000000903", "000000000904"]
        assert (kept[-1] / "results.jsonl").read_text() == f'{{"attempt": {attempt}}}\n'
    assert (tmp_path / ".venv").is_dir()  # the odd name was skipped, not split


def test_nightly_takes_a_ref_and_a_runner():
    nightly = workflows.load(REPO / "ci" / "workflows" / "nightly-gpu.yml")
    inputs = nightly["on"]["workflow_dispatch"]["inputs"]
    registry = load_registry(REPO / "ci" / "runners.toml")
    assert set(inputs["runner"]["options"]) == {"all"} | {r.label for r in registry.runners.values() if r.gpus}
    assert [w.get("ref") for w in _checkouts(nightly, "nightly")] == ["${{ inputs.ref || github.sha }}"]
    matrix = nightly["jobs"]["nightly"]["strategy"]["matrix"]
    for entry in matrix["exclude"]:  # each drops its label exactly when another one runner was chosen
        expr = workflows.EXPR_RE.match(entry["runner"]).group(1)
        label = expr.split("&& '")[-1].split("'")[0]
        for chosen in ("", "all", *matrix["runner"]):
            dropped = workflows.evaluate(expr, {"inputs.runner": chosen})
            assert dropped == (label if chosen not in ("", "all", label) else "none"), (label, chosen)
    assert "actions/cache" not in (REPO / "ci" / "workflows" / "nightly-gpu.yml").read_text()
    merge = nightly["jobs"]["merge"]["strategy"]["matrix"]
    assert {k: merge[k] for k in ("runner", "exclude", "include")} == {k: matrix[k] for k in ("runner", "exclude", "include")}
    assert [w.get("ref") for w in _checkouts(nightly, "merge")] == ["${{ inputs.ref || github.sha }}"]


def test_each_runner_label_is_swept_in_shards_and_merged_into_one_night():
    """Shards 1..SHARDS of every label (kvbench counts them from 1), their artifacts named
    by label and shard, and one merge per label reading exactly those."""
    nightly = workflows.load(REPO / "ci" / "workflows" / "nightly-gpu.yml")
    count = int(nightly["env"]["SHARDS"])
    assert nightly["jobs"]["nightly"]["strategy"]["matrix"]["shard"] == list(range(1, count + 1))
    sweep = next(s["run"] for s in nightly["jobs"]["nightly"]["steps"] if s.get("name") == "Sweep this shard")
    assert '--shard "$SHARD/$SHARDS" --run-id "$RUN_ID"' in sweep and "--nights nights" in sweep
    upload = next(s for s in nightly["jobs"]["nightly"]["steps"] if s.get("name") == "Upload this shard")
    assert upload["with"]["name"] == "shard-${{ matrix.runner }}-${{ matrix.shard }}"
    assert "MLFLOW_TRACKING_URI" not in nightly["jobs"]["nightly"]["env"]  # the shards do not log; the night does
    merge = nightly["jobs"]["merge"]
    assert merge["needs"] == "nightly" and merge["if"] == "${{ !cancelled() }}"
    steps = [s.get("name") for s in merge["steps"]]
    assert steps.index("Merge the shards") < steps.index("Compare with the baseline") < steps.index("Keep this night")
    fetch = next(s for s in merge["steps"] if s.get("name") == "Download the shards")
    assert fetch["with"]["pattern"] == "shard-${{ matrix.runner }}-*"


UNSAFE_WORKFLOWS = {
    "pull_request_target with the pull request's head": (
        "on: pull_request_target\njobs:\n  t:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - uses: actions/checkout@v4\n        with:\n          ref: ${{ github.event.pull_request.head.sha }}\n"
        "      - run: make test\n        env:\n          TOKEN: ${{ secrets.TOKEN }}\n", "pull_request_target checks out"),
    "comment body in github-script": (
        "on: issue_comment\njobs:\n  t:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - uses: actions/github-script@v7\n        with:\n"
        "          script: console.log(\"${{ github.event.comment.body }}\")\n", "github-script pastes"),
    "pull request title in github-script": (
        "on: pull_request\njobs:\n  t:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - uses: actions/github-script@v7\n        with:\n"
        "          script: core.info('${{ github.event.pull_request.title }}')\n", "github-script pastes"),
    "head ref in run": (
        "on: pull_request\njobs:\n  t:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - run: echo ${{ github.head_ref }}\n", "contains ${{ }}"),
}


@pytest.mark.parametrize("name", sorted(UNSAFE_WORKFLOWS))
def test_lint_flags_untrusted_code_and_text(tmp_path, name):
    text, needle = UNSAFE_WORKFLOWS[name]
    root = tmp_path / "repo"
    shutil.copytree(REPO / "ci", root / "ci")
    (root / "suites").mkdir()
    (root / "ci" / "workflows" / "unsafe.yml").write_text(text)
    problems = [p for p in lint(root) if p.startswith("unsafe.yml")]
    assert problems and needle in problems[0], problems
    # The same workflows made safe pass: the base checkout, the value through env:.
    safe = text.replace("ref: ${{ github.event.pull_request.head.sha }}", "ref: ${{ github.sha }}")
    (root / "ci" / "workflows" / "unsafe.yml").write_text(safe)
    if "pull_request_target" in name:
        assert not [p for p in lint(root) if p.startswith("unsafe.yml")]


def test_pull_request_tests_run_without_the_mlflow_secret():
    """/rerun-test runs the pull request's code (its author may ask, on the cpu runner);
    only a suite rerun (maintainers) logs to MLflow, so only it is given the server."""
    rerun = workflows.load(REPO / "ci" / "workflows" / "rerun-test.yml")
    env = rerun["jobs"]["run"]["env"]["MLFLOW_TRACKING_URI"]
    expr = workflows.EXPR_RE.match(env).group(1)
    secret = {"secrets.MLFLOW_TRACKING_URI": "https://user:pw@mlflow.example"}
    assert workflows.evaluate(expr, {"inputs.suite": "", **secret}) == ""
    assert workflows.evaluate(expr, {"inputs.suite": "nightly-gpu", **secret}) == secret["secrets.MLFLOW_TRACKING_URI"]


def test_pull_request_artifacts_land_outside_the_trusted_checkout():
    """The report job runs the default branch's code, installed editable, with a write
    token; the results it reads were written by the pull request's code. They are
    unpacked outside the checkout, so no archive entry can land on the code that runs."""
    rerun = workflows.load(REPO / "ci" / "workflows" / "rerun-test.yml")
    steps = rerun["jobs"]["report"]["steps"]
    fetch = next(s for s in steps if str(s.get("uses", "")).startswith("actions/download-artifact@"))
    assert fetch["with"]["path"].startswith("${{ runner.temp }}/")
    report = next(s for s in steps if s.get("name") == "Report")["run"]
    assert '--results "$RUNNER_TEMP/' in report and "results/runs" not in report
