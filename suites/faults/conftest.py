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
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    return path


@pytest.fixture
def bypass_evict_floor(monkeypatch: pytest.MonkeyPatch) -> None:
    """A decode-side PD caller that skips the SWA evict floor (DESIGN.md section 1): it
    keeps the last ``window`` positions as the tail instead of page-flooring where the
    tail starts, so it writes ``fill_len - window`` as the cursor (18 for fill_len 50,
    window 32, ps 16) and K6 must fire at that write. The fault is the formula the
    memory layer's PD prealloc reads; replay and the harness keep the real one."""
    from mini_engine.memory.extents import swa_cursor

    monkeypatch.setattr(swa_cursor, "pd_swa_tail_len",
                        lambda fill_len, window, page_size, radix=False: min(fill_len, window))
