"""Every install role in a fresh venv: the wheel is built once, installed in a new venv
per role (no extra, `engine`, `harness`, `ci`), and every command runs once from a
directory outside the checkout: `--help`, then one cheap real invocation. Each either
works or refuses in one line naming the extra it needs; none ends in a traceback.

The venv test is marked `roles` (minutes: two of the venvs get torch, one MLflow), so the
default `python -m pytest` runs only the cheap checks of its table; `.ci/run` runs it as its own step. Installs go through
pip's cache and the torch CPU wheel wherever pip finds them, with `--no-compile`
(compiling torch's sources to bytecode is most of an install's time and none of this
check).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TORCH = "torch==2.13.0"  # the pin of .ci/run and the README: pip takes the CPU build where it finds one
TRACE = ROOT / "examples" / "trace_dflash_pre35265.jsonl"  # data only: nothing of the checkout is imported
ONE_CONFIG = "dflash and profile:sglang-0.5.23 and ps:16 and win:none and not model"

# The roles a venv's install provides (engine's packages are also all that conform's check asks
# for; SGLang itself is never installed here, and conform says so in its own line). A role not
# listed may still be there through another's dependencies (MLflow brings pyyaml, pydantic
# and pytest come with the harness: the ci role's packages): such a command may work instead.
PROVIDES = {"bare": set(), "engine": {"engine", "conform"}, "harness": {"harness", "engine", "conform"},
            "ci": {"ci"}}
EXTRA = {"bare": None, "engine": "engine", "harness": "harness", "ci": "ci"}

# command, role, argv (after `kvbench`), what a venv with the role must give: "ok" (exit 0)
# or "line" (exit 2, one `kvbench: error:` line: input the command rightly refuses).
# In order: later commands read what earlier ones wrote (the sweep's run night1).
INVOCATIONS = [
    ("run", "harness", ["run", "--num-requests", "4", "--input-len", "32", "--output-len", "16",
                        "--trace", "t.jsonl"], "ok"),
    ("replay", "engine", ["replay", str(TRACE)], "ok"),
    ("sweep", "harness", ["sweep", "smoke", "--no-mlflow", "--filter", ONE_CONFIG, "--run-id", "night1"], "ok"),
    ("compare", "harness", ["compare", "night1", "night1"], "ok"),
    ("baseline", "harness", ["baseline", "night1", "--out", "base.json"], "ok"),
    ("history", "harness", ["history", "smoke"], "ok"),
    ("report", "harness", ["report", "night1", "--out", "report.html"], "ok"),
    ("sync", "harness", ["sync", "night1", "--mlflow-uri", "sqlite:///mlflow.db"], "ok"),
    # night1 is a whole night, not a shard: merge refuses it in one line.
    ("merge", "harness", ["merge", "night1", "--run-id", "merged"], "line"),
    # Not a git repository here, and no local MLflow store: each a one-line refusal.
    ("bisect", "harness", ["bisect", "--good", "HEAD~1", "--bad", "HEAD", "--config", "x", "--repo", "."], "line"),
    ("ui", "harness", ["ui"], "line"),
    ("conform", "conform", ["conform", str(TRACE)], "line"),
    ("bot", "ci", ["bot", "plan", "/rerun-suite smoke --filter spec:dflash", "--root", str(ROOT),
                   "--user", "me", "--association", "OWNER"], "ok"),
    ("ci", "ci", ["ci", "lint", "--root", str(ROOT)], "ok"),
]


def test_the_table_runs_every_command():
    from harness.commands import COMMANDS, ROLE

    assert sorted(c for c, *_ in INVOCATIONS) == sorted(COMMANDS)
    assert all(ROLE[c] == role for c, role, *_ in INVOCATIONS)


def _proc(rc: int, out: str = "", err: str = "") -> subprocess.CompletedProcess:
    return subprocess.CompletedProcess([], rc, out, err)


def test_the_verdicts():
    line = "kvbench: error: kvbench sweep needs the harness extra (numpy is not installed): pip install 'kvbench[harness]'\n"
    assert verdict(_proc(2, err=line), "ok", "harness") is None  # the role is missing: its line
    assert "not the line" in verdict(_proc(2, err=line), "ok", "ci")
    assert "refused though" in verdict(_proc(2, err=line), "line", None)  # installed, yet refused
    assert verdict(_proc(0, "done\n"), "ok", "ci") is None  # the role came with another's: it works
    assert "traceback" in verdict(_proc(1, err="Traceback (most recent call last):\n"), "ok", "harness")
    assert "expected 0" in verdict(_proc(1, "x"), "ok", None)
    assert verdict(_proc(2, err="kvbench: error: no git repository\n"), "line", None) is None
    assert "expected one error line" in verdict(_proc(2, err="kvbench: error: a\nb\n"), "line", None)


def clean_env(work: Path) -> dict[str, str]:
    """The caller's environment without what would make the venv import the checkout or
    another venv, or log to a real MLflow server."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "MLFLOW_TRACKING_URI", "PYTHONSTARTUP")}
    env["KVBENCH_RESULTS"] = str(work / "results")
    return env


def make_venv(role: str, wheel: Path, where: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, capture_output=True)
    py = where / "bin" / "python"
    extra = EXTRA[role]
    target = f"kvbench[{extra}] @ {wheel.as_uri()}" if extra else str(wheel)
    # torch named here too, so the engine's `torch>=2.4,<2.15` resolves to the pin (the CPU wheel
    # where pip's index serves one), not to the newest CUDA build.
    pkgs = [TORCH, target] if role in ("engine", "harness") else [target]
    proc = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-compile", *pkgs],
                          capture_output=True, text=True, env=clean_env(where), timeout=1800)
    assert proc.returncode == 0, f"pip install {' '.join(pkgs)} failed:\n{proc.stdout}{proc.stderr}"
    return where / "bin" / "kvbench"


def verdict(proc: subprocess.CompletedProcess, expect: str, extra: str | None) -> str | None:
    """What is wrong with one command's outcome, or None. ``extra``: the role the command
    needs when this venv's install does not provide it."""
    if "Traceback" in proc.stdout + proc.stderr:
        return "a traceback"
    lines = proc.stderr.splitlines()
    one_line = proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("kvbench: error: ")
    refused = one_line and proc.stdout == "" and " extra (" in lines[0]
    if refused:  # the one line naming the extra: right only where the role is missing, and only its own
        if extra is None:
            return f"refused though its role is installed: {lines[0]}"
        return None if f"pip install 'kvbench[{extra}]'" in lines[0] else f"not the line naming the {extra} extra"
    if expect == "ok" and proc.returncode != 0:
        return f"exit {proc.returncode}, expected 0"
    if expect == "line" and not one_line:
        return f"exit {proc.returncode} with {len(lines)} stderr lines, expected one error line and exit 2"
    return None


@pytest.mark.roles
@pytest.mark.parametrize("role", list(PROVIDES))
def test_every_command_in_a_fresh_venv(role, wheel, tmp_path):
    started = time.monotonic()
    kvbench = make_venv(role, wheel, tmp_path / "venv")
    installed_s = time.monotonic() - started
    work = tmp_path / "elsewhere"  # outside the checkout: nothing there to import or read by accident
    work.mkdir()
    env = clean_env(work)
    problems = []
    for command, needs, argv, expect in INVOCATIONS:
        proc = subprocess.run([str(kvbench), command, "--help"], cwd=work, env=env, capture_output=True,
                              text=True, timeout=120)
        if proc.returncode != 0 or "Traceback" in proc.stderr or f"usage: kvbench {command}" not in proc.stdout:
            problems.append(f"kvbench {command} --help: exit {proc.returncode}\n{proc.stderr[-2000:]}")
        proc = subprocess.run([str(kvbench), *argv], cwd=work, env=env, capture_output=True, text=True,
                              timeout=600)
        wrong = verdict(proc, expect, None if needs in PROVIDES[role] else needs)
        if wrong:
            problems.append(f"kvbench {' '.join(argv)}: {wrong}\n{(proc.stdout + proc.stderr)[-3000:]}")
    # The durations, for whoever sizes CI (pytest -rP, or the step's log).
    print(f"role {role}: install {installed_s:.0f} s, commands {time.monotonic() - started - installed_s:.0f} s")
    assert not problems, f"role {role}:\n" + "\n".join(problems)
