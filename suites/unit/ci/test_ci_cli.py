"""`kvbench ci rerun-args`, `kvbench bot report` and `kvbench bot plan` through the CLI's
main() (in process: the console script is the same function): what the rerun workflow
runs, re-checking inputs that may not have come from the bot."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.ci import reply
from harness.ci.bot import Group, Plan
from harness.cli import main
from harness.commands.ci import parse_cli

FIX = Path(__file__).resolve().parent / "fixtures"


@dataclass
class Out:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def kv(capsys):
    def run(*args):
        capsys.readouterr()
        try:
            rc = main([str(a) for a in args])
        except SystemExit as exc:  # argparse errors
            rc = exc.code
        out, err = capsys.readouterr()
        return Out(rc, out, err)

    return run


def test_rerun_args_tests(tree, kv):
    tests = json.dumps(["suites/unit/test_alloc.py::TestPages::test_free", "suites/unit/test_alloc.py"])
    out = kv("ci", "rerun-args", "--root", tree, "--runner", "cpu", "--tests", tests, "--run-id", "rerun-5-1")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["python", "-m", "pytest", "-n", "0", "-p", "no:cacheprovider", "-m", "",
                                      "suites/unit/test_alloc.py::TestPages::test_free", "suites/unit/test_alloc.py"]


def test_rerun_args_suite(tree, kv):
    out = kv("ci", "rerun-args", "--root", tree, "--runner", "1-gpu-h100", "--suite", "nightly-gpu",
             "--filter", "spec:eagle and not ps:1", "--run-id", "rerun-5-1")
    assert out.returncode == 0, out.stderr
    argv = json.loads(out.stdout)
    assert argv == ["kvbench", "sweep", "nightly-gpu", "--run-id", "rerun-5-1", "--filter", "spec:eagle and not ps:1"]
    parse_cli(argv[1:])  # the command the run job will execute is one the CLI accepts


@pytest.mark.parametrize("args, message", [
    (["--runner", "cpu", "--tests", '["suites/gpu/test_attention_gpu.py"]'], "runs on `1-gpu-h100`, not on `cpu`"),
    (["--runner", "cpu", "--tests", '["suites/unit/test_alloc.py; id"]'], "contains SEMICOLON"),
    (["--runner", "cpu", "--tests", '["../../etc/test_x.py"]'], "'..'"),
    (["--runner", "cpu", "--tests", "suites/unit/test_alloc.py"], "JSON list"),
    (["--runner", "cpu", "--tests", '{"a": 1}'], "JSON list"),
    (["--runner", "tpu-v5", "--tests", '["suites/unit/test_alloc.py"]'], "runner must be one of"),
    (["--runner", "cpu"], "give either --tests"),
    (["--runner", "cpu", "--suite", "smoke", "--tests", '["suites/unit/test_alloc.py"]'], "not both"),
    (["--runner", "cpu", "--suite", "smoke", "--filter", "x;reboot"], "--filter word"),
    (["--runner", "cpu", "--suite", "../smoke"], "a suite name is"),
    (["--runner", "cpu", "--suite", "smoke", "--run-id", "a/../b"], "--run-id must be"),
    (["--runner", "cpu", "--suite", "smoke", "--sha", "refs/heads/main"], "--sha must be a 40-character commit id"),
])
def test_rerun_args_refuses(tree, kv, args, message):
    if "--run-id" not in args:
        args = [*args, "--run-id", "r1"]
    out = kv("ci", "rerun-args", "--root", tree, *args)
    assert out.returncode == 2 and out.stdout == ""
    assert message in out.stderr and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr


def test_report_dry_run_with_a_compare_table(tmp_path, kv):
    plan = Plan("rerun-suite", user="core-dev", pr=3, groups=[Group("cpu", suite="smoke", filter="ps:16")])
    body = tmp_path / "reply.md"
    body.write_text(reply.render(plan))
    night = FIX / "nights" / "nightly-20261127"
    out = kv("bot", "report", "--dry-run", "--body-file", body, "--comment-id", 1, "--group", 1,
             "--result", "success", "--run-url", "https://github.com/example/kvbench/actions/runs/8",
             "--mlflow-url", "https://mlflow.example", "--results", night, "--baseline", FIX / "baseline_cpu.json")
    assert out.returncode == 0, out.stderr
    group = reply.parse(out.stdout).groups[0]
    assert group.status == "failed"  # the job passed, but the table shows regressions
    assert group.mlflow == ["https://mlflow.example/#/runs/" + "3d" * 16]
    assert "| `peak_pages_held` | 118 | 120 |" in out.stdout and "leaked_pages" in out.stdout
    # A suite-less group (tests) takes the job result as it is.
    out = kv("bot", "report", "--dry-run", "--body-file", body, "--comment-id", 1, "--group", 1,
             "--result", "cancelled", "--results", tmp_path / "absent")
    assert reply.parse(out.stdout).groups[0].status == "cancelled"
    out = kv("bot", "report", "--dry-run", "--body-file", body, "--comment-id", 1, "--group", 2, "--status", "passed")
    assert out.returncode == 2 and "group must be in 1..1" in out.stderr


def test_plan_command(tree, kv):
    out = kv("bot", "plan", "/rerun-test test_alloc.py::TestPages.test_free", "--root", tree)
    assert out.returncode == 0 and "**1. runner `cpu`**" in out.stdout
    out = kv("bot", "plan", "/rerun-test suites/gpu/multi/test_tp8.py", "--root", tree, "--user", "pr-opener",
             "--association", "CONTRIBUTOR")
    assert out.returncode == 1 and "no permission to run on runner `8-gpu-h200`" in out.stdout
    out = kv("bot", "plan", "thanks!", "--root", tree)
    assert out.returncode == 0 and "not a bot command" in out.stdout


def test_report_with_unreadable_results_still_sets_the_status(tmp_path, kv):
    """The results come from the pull request's run: damaged ones must not leave the
    group 'running' forever. The status is set (a pass becomes a failure) with the reason."""
    plan = Plan("rerun-suite", user="core-dev", pr=3, groups=[Group("cpu", suite="smoke")])
    body = tmp_path / "reply.md"
    body.write_text(reply.render(plan))
    results = tmp_path / "run"
    results.mkdir()
    (results / "results.jsonl").write_text("not json\n")
    out = kv("bot", "report", "--dry-run", "--body-file", body, "--comment-id", 1, "--group", 1,
             "--result", "success", "--results", results, "--baseline", FIX / "baseline_cpu.json")
    assert out.returncode == 0, out.stderr
    group = reply.parse(out.stdout).groups[0]
    assert group.status == "failed" and "failed: artifact unreadable" in group.table
