"""Extras by role: the bot, triage and `ci lint` run with the `ci` extra alone (no torch,
numpy, MLflow or plotting), and a command whose role is missing says which extra to
install in one line.

Each command runs in a fresh interpreter whose import system refuses the harness and
engine packages, as a venv with only `pip install '.[ci]'` would. The blocker also
records every refused import: a CI command must not even try one (a `try: import`
that quietly falls back would still hide a dependency).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.commands import COMMANDS, ROLE
from harness.core.errors import MissingExtra
from harness.core.roles import EXTRA_PACKAGES, ROLE_PACKAGES, missing_extra

REPO = Path(__file__).resolve().parents[3]
FIX = Path(__file__).resolve().parent / "fixtures"
BLOCKED = ("torch", "numpy", "mlflow", "matplotlib", "scipy", "safetensors", "rich", "pandas")

# Installs a meta-path finder that refuses BLOCKED, then runs the CLI's main() with argv;
# the refused names go to the file named by the first argument.
RUNNER = """
import sys
log, argv = sys.argv[1], sys.argv[2:]
refused = []

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            refused.append(name)
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Refuse())
try:
    from harness.cli import main
    code = main(argv)
except SystemExit as exc:
    code = exc.code
finally:
    open(log, "w").write("\\n".join(refused))
sys.exit(code)
"""


def kvbench(tmp_path: Path, *args: object, cwd: Path = REPO,
            blocked: tuple[str, ...] = BLOCKED) -> tuple[subprocess.CompletedProcess, list[str]]:
    log = tmp_path / "refused.txt"
    code = f"BLOCKED = {blocked!r}\n{RUNNER}"
    env = {**os.environ, "PYTHONPATH": str(REPO), "KVBENCH_RESULTS": str(tmp_path / "results")}
    proc = subprocess.run([sys.executable, "-c", code, str(log), *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)
    refused = log.read_text().split() if log.exists() else []
    return proc, refused


def test_the_blocker_blocks(tmp_path):
    # Without this, every test below could pass on an interpreter that imports nothing.
    proc, refused = kvbench(tmp_path, "replay", tmp_path / "none.jsonl")
    assert refused and proc.returncode == 2


def test_help_and_version_need_no_role(tmp_path):
    proc, refused = kvbench(tmp_path, "--help")
    assert proc.returncode == 0 and "sweep" in proc.stdout and "bot" in proc.stdout, proc.stderr
    proc, refused2 = kvbench(tmp_path, "--version")
    assert proc.returncode == 0 and proc.stdout.startswith("kvbench "), proc.stderr
    assert refused == refused2 == []


@pytest.mark.parametrize("comment, shown", [
    ("/rerun-test suites/unit/test_alloc.py::TestPages.test_free", "suites/unit/test_alloc.py::TestPages::test_free"),
    # The filter is checked with pytest's -k parser: the ci extra carries pytest, not torch.
    ("/rerun-suite smoke --filter spec:dflash and not ps:1", "kvbench sweep smoke --run-id RUN_ID --filter"),
])
def test_bot_plan_with_the_ci_role_only(tree, tmp_path, comment, shown):
    proc, refused = kvbench(tmp_path, "bot", "plan", comment, "--root", tree, "--association", "OWNER")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert shown in proc.stdout
    assert refused == []


def test_bot_handle_a_recorded_event_with_the_ci_role_only(tree, tmp_path):
    proc, refused = kvbench(tmp_path, "bot", "handle", "--event", FIX / "events" / "rerun_test_single.json",
                            "--root", tree, "--tree", tree, "--head-sha", "a" * 40)
    assert proc.returncode == 0, proc.stderr
    assert "bot: /rerun-test by core-dev on #42: 1 group(s)" in proc.stdout
    assert "would call:" in proc.stdout
    assert refused == []


def test_ci_lint_with_the_ci_role_only(tmp_path):
    proc, refused = kvbench(tmp_path, "ci", "lint")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ci lint: 0 problem(s)" in proc.stderr
    assert refused == []


def test_triage_and_report_with_the_ci_role_only(tmp_path):
    nights = sorted((FIX / "nights").iterdir())
    proc, refused = kvbench(tmp_path, "ci", "triage", "--nights", *nights, "--baseline", FIX / "baseline_cpu.json",
                            "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "triage: 1 tracked" in proc.stdout
    # The rerun workflow's report job: a reply updated with the run's compare table.
    body = tmp_path / "reply.md"
    head = {"v": 1, "command": "rerun-suite", "user": "u", "pr": 1, "notes": [], "head": "",
            "groups": [{"runner": "cpu", "suite": "smoke", "tests": [], "filter": "", "status": "queued"}]}
    body.write_text(f"<!-- kvbench-bot {json.dumps(head)} -->\nreply\n")
    proc, refused2 = kvbench(tmp_path, "bot", "report", "--comment-id", 1, "--group", 1, "--result", "success",
                             "--results", nights[-1], "--baseline", FIX / "baseline_cpu.json",
                             "--dry-run", "--body-file", body)
    assert proc.returncode == 0, proc.stderr
    assert "| config | metric |" in proc.stdout
    assert refused == refused2 == []


@pytest.mark.parametrize("args, extra", [
    (["sweep", "smoke"], "harness"),
    (["run", "--spec", "dflash", "--block-size", "16"], "harness"),
    (["replay", "none.jsonl"], "engine"),
])
def test_a_missing_role_is_one_line_naming_the_extra(tmp_path, args, extra):
    proc, refused = kvbench(tmp_path, *args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert refused  # it did need a blocked package
    line = proc.stderr.strip()
    assert "\n" not in line and "Traceback" not in proc.stderr
    assert line.startswith(f"kvbench: error: kvbench {args[0]} needs the {extra} extra")
    assert f"pip install 'kvbench[{extra}]'" in line


def test_only_a_role_package_counts_as_missing():
    # A module of the project itself missing is a bug: the CLI re-raises it.
    assert missing_extra(ImportError("x", name="harness.nowhere"), "sweep", "harness") is None
    assert missing_extra(ImportError("x"), "sweep", "harness") is None
    err = missing_extra(ModuleNotFoundError("x", name="mlflow.tracking"), "sync", "harness")
    assert isinstance(err, MissingExtra) and "(mlflow is not installed)" in str(err)


# Arguments each command parses (what they name need not exist: the role check comes first).
VALID_ARGS = {"run": [], "sweep": ["smoke"], "compare": ["r"], "baseline": ["r"], "history": ["smoke"],
              "report": ["r"], "bisect": ["--good", "a", "--bad", "b", "--config", "c"], "sync": ["r"], "ui": [],
              "merge": ["a", "b", "--run-id", "m"],
              "replay": ["t.jsonl"], "conform": ["t.jsonl"], "bot": ["plan", "/rerun-test x"], "ci": ["lint"]}


@pytest.mark.parametrize("command", COMMANDS)
def test_a_bare_install_refuses_every_command_in_one_line(tmp_path, command):
    """`pip install .` with no extra: not even pydantic, yaml or pytest. Each command says
    which extra it needs before importing anything of it (pydantic via harness.judge.baseline
    used to end in a traceback), and its --help still works."""
    bare = tuple(sorted(EXTRA_PACKAGES | {"pydantic", "yaml", "pytest", "xdist"}))
    proc, _ = kvbench(tmp_path, command, *VALID_ARGS[command], cwd=tmp_path, blocked=bare)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
    extra = ROLE[command]
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(f"kvbench: error: kvbench {command} needs the {extra} extra (")
    assert f"pip install 'kvbench[{extra}]'" in proc.stderr
    proc, _ = kvbench(tmp_path, command, "--help", cwd=tmp_path, blocked=bare)
    assert proc.returncode == 0 and f"usage: kvbench {command}" in proc.stdout, proc.stderr


def test_every_role_is_an_extra_and_every_command_has_one():
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    extras = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    assert set(ROLE) == set(COMMANDS) and set(ROLE.values()) <= set(ROLE_PACKAGES) <= extras
