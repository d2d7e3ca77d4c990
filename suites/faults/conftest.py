"""Fault injection: a sweep, its run directory and the bot under a hostile or broken
environment (concurrent sweeps, a full disk, a read-only root, damaged artifacts,
injected markdown). Every test here carries the ``faults`` marker; CI runs them.

Sweeps run as real ``kvbench`` processes on a two-config suite without MLflow
(unless a test is about the store), so the whole marker stays around a minute.
"""

from __future__ import annotations

from pathlib import Path

import pytest

FAULTS_DIR = Path(__file__).resolve().parent
TINY = """\
[defaults]
num_requests = 2
input_len = 16
output_len = 8
min_len = 8
pool_tokens = 1024
[axes]
page_size = [1, 16]
"""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if FAULTS_DIR in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.faults)


@pytest.fixture
def results_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "results"
    root.mkdir()
    monkeypatch.setenv("KVBENCH_RESULTS", str(root))
    for name in ("MLFLOW_TRACKING_URI", "KVBENCH_GRID_RUN_DIR", "KVBENCH_GRID_SUITE", "KVBENCH_GRID_MLFLOW_URI",
                 "KVBENCH_GRID_PARENT", "KVBENCH_GRID_ROOT", "KVBENCH_GRID_FILTER"):
        monkeypatch.delenv(name, raising=False)
    return root


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    return path


@pytest.fixture
def cli():
    """The kvbench CLI in-process: cli("sweep", ...) -> exit code."""
    from harness.cli import main

    return lambda *argv: main([str(a) for a in argv])
