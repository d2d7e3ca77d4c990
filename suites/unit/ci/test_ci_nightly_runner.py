"""The nightly's self-hosted runner: its first step names every missing prerequisite in
one line, and its venv is kept between nights, keyed on the dependency pins. Each step's
own script runs under bash with fake tools on PATH, as GitHub would run it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from harness.ci import workflows

REPO = Path(__file__).resolve().parents[3]
NIGHTLY = workflows.load(REPO / "ci" / "workflows" / "nightly-gpu.yml")
STEPS = NIGHTLY["jobs"]["nightly"]["steps"]


def _step(name: str) -> dict:
    return next(s for s in STEPS if s.get("name") == name)


def _bash(script: str, cwd: Path, path: str, env: dict | None = None) -> subprocess.CompletedProcess:
    # The shell GitHub runs a bash step with.
    return subprocess.run(["/bin/bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script], cwd=cwd,
                          env={"PATH": path, **(env or {})}, capture_output=True, text=True, timeout=60)


def _tools(where: Path, *names: str) -> str:
    """A PATH holding only these tools (python3 is this interpreter, gh a stand-in)."""
    where.mkdir(parents=True, exist_ok=True)
    for name in names:
        if name == "python3":
            os.symlink(os.path.realpath(sys.executable), where / name)
        elif name == "gh":
            (where / name).write_text("#!/bin/sh\nexit 0\n")
            (where / name).chmod(0o755)
        else:
            os.symlink(shutil.which(name), where / name)
    return str(where)


def test_the_prerequisites_are_checked_first_and_named_in_one_line(tmp_path):
    check = _step("Check the runner")
    assert STEPS[0] is check  # before checkout, which needs git
    script = check["run"]
    ok = _bash(script, tmp_path, _tools(tmp_path / "all", "python3", "git", "gh", "sha256sum"))
    assert ok.returncode == 0 and ok.stdout == "", ok.stdout + ok.stderr
    no_gh = _bash(script, tmp_path, _tools(tmp_path / "no-gh", "python3", "git", "sha256sum"))
    assert no_gh.returncode == 1 and no_gh.stdout.count("\n") == 1
    assert no_gh.stdout.startswith("::error::this runner lacks: gh (docs/ci.md")
    bare = _bash(script, tmp_path, _tools(tmp_path / "bare", "sha256sum"))
    assert bare.returncode == 1 and bare.stdout.count("\n") == 1
    assert "lacks: python3(>=3.10) git gh (" in bare.stdout


FAKE_PYTHON3 = """#!/bin/bash
# python3 -VV, and python3 -m venv DIR making a venv whose python logs what it is asked.
if [ "$1" = -VV ]; then echo "Python 3.11.7 (fake)"; exit 0; fi
[ "$1" = -m ] && [ "$2" = venv ] || exit 3
mkdir -p "$3/bin"
printf '#!/bin/bash\\necho "$*" >> "$LOG"\\n' > "$3/bin/python"
chmod +x "$3/bin/python"
echo "venv $3" >> "$LOG"
"""


def test_the_venv_is_kept_between_nights_and_rebuilt_when_a_pin_changes(tmp_path):
    install = _step("Install")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python3").write_text(FAKE_PYTHON3)
    (bindir / "python3").chmod(0o755)
    checkout, tool = tmp_path / "checkout", tmp_path / "tool"
    checkout.mkdir()
    pyproject = (REPO / "pyproject.toml").read_text()
    log, github_path = tmp_path / "log", tmp_path / "github_path"
    env = {**install["env"], "RUNNER_TOOL_CACHE": str(tool), "RUNNER_NAME": "gpu-a", "GITHUB_PATH": str(github_path),
           "LOG": str(log)}
    other = tool / "kvbench-venv" / "gpu-b-0123456789abcdef"  # another runner's venv on the same machine
    other.mkdir(parents=True)

    def night(text: str) -> tuple[list[str], str]:
        (checkout / "pyproject.toml").write_text(text)
        log.write_text("")
        proc = _bash(install["run"], checkout, f"{bindir}:/usr/bin:/bin", env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return log.read_text().splitlines(), github_path.read_text().splitlines()[-1]

    calls, first = night(pyproject)
    assert calls[0].startswith("venv ") and "-m pip install -q torch==2.13.0" in calls
    assert "-m pip install -q -e .[harness,ci]" in calls and calls[-1] == "-m pip install -q --no-deps -e ."
    venvs = tool / "kvbench-venv"
    assert first.startswith(str(venvs / "gpu-a-")) and first.endswith("/bin")
    # The next night, or one that only changed something else of pyproject.toml: the same venv.
    assert night(pyproject) == (["-m pip install -q --no-deps -e ."], first)
    assert night(pyproject.replace('"slow: takes', '"slow: it takes')) == (["-m pip install -q --no-deps -e ."], first)
    # A pin moved: a new venv, and the runner's old one is gone (another runner's stays).
    calls, second = night(pyproject.replace('"mlflow==3.17.2"', '"mlflow==3.17.3"'))
    assert calls[0].startswith("venv ") and second != first
    assert sorted(p.name for p in venvs.iterdir()) == sorted([other.name, Path(second).parent.name])
    # A build that died half-way (no .complete) is built again, not trusted.
    (Path(second).parent / ".complete").unlink()
    calls, third = night(pyproject.replace('"mlflow==3.17.2"', '"mlflow==3.17.3"'))
    assert calls[0].startswith("venv ") and third == second
