"""Helpers for the harness tests: isolated results roots and the kvbench CLI in-process."""

from __future__ import annotations

from pathlib import Path

import pytest

# Hypothesis profiles (default / long via KVBENCH_HYPOTHESIS) come from suites/conftest.py.


@pytest.fixture
def results_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "results"
    root.mkdir()
    monkeypatch.setenv("KVBENCH_RESULTS", str(root))
    for name in ("MLFLOW_TRACKING_URI", "KVBENCH_GRID_RUN_DIR", "KVBENCH_GRID_SUITE", "KVBENCH_GRID_MLFLOW_URI",
                 "KVBENCH_GRID_PARENT", "KVBENCH_GRID_ROOT"):
        monkeypatch.delenv(name, raising=False)
    return root


@pytest.fixture
def cli():
    """The kvbench CLI in-process: cli("sweep", "smoke") -> exit code."""
    from harness.cli import main

    return lambda *argv: main([str(a) for a in argv])
