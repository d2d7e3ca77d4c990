"""Helpers of the fault tests: kvbench as a process of its own (a second user, a
killed or resource-limited process). A module, not the conftest: test modules import
it by name, which is unique on the path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def kvbench_env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_TRACKING_URI", "PYTEST_"))}
    env.update(KVBENCH_RESULTS=str(root), PYTHONPATH=str(REPO))
    return env


def start(root: Path, *args, preexec_fn=None, env: dict[str, str] | None = None) -> subprocess.Popen:
    """A kvbench process of its own (a second user, a killed or limited process);
    ``env``: variables to add to its environment."""
    return subprocess.Popen([sys.executable, "-m", "harness.cli", *map(str, args)], cwd=REPO,
                            env={**kvbench_env(root), **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=preexec_fn)


def finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=600)
    return proc.returncode, out, err
