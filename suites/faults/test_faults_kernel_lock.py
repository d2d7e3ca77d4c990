"""The CPU kernels' build lock: a lock left by a killed builder is taken over at once,
saying so; a live builder is waited for with a labelled line and a bound. torch's own
lock file gave neither: every model run after a killed build slept on it unseen."""

from __future__ import annotations

import fcntl
import logging
import os

import pytest

from mini_engine.model import build_lock, cpu_kernels


@pytest.fixture
def build_dir(tmp_path, monkeypatch):
    """torch's builder pointed at a scratch build directory; its load records whether
    torch's lock file was there (torch would sleep on it, unseen, with no bound)."""
    from torch.utils import cpp_extension

    loads: list[bool] = []
    monkeypatch.setattr(cpp_extension, "_get_build_directory", lambda name, verbose: str(tmp_path))
    monkeypatch.setattr(cpp_extension, "load", lambda *a, **k: loads.append((tmp_path / "lock").exists()))
    monkeypatch.setattr(cpu_kernels.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    return tmp_path, loads


def test_a_build_lock_left_by_a_killed_builder_is_taken_over(build_dir, caplog):
    build_dir, loads = build_dir
    (build_dir / "lock").write_text("")  # a fresh one: the old ten-minute age rule kept it
    with caplog.at_level(logging.WARNING):
        assert cpu_kernels._load()
    assert loads == [False]  # torch's builder never met the dead one's lock
    assert f"removing a kernel build lock no live builder holds (a build was killed): {build_dir / 'lock'}" in caplog.text


def test_a_live_builder_is_waited_for_with_a_label_and_a_bound(build_dir, caplog, monkeypatch):
    build_dir, loads = build_dir
    monkeypatch.setattr(build_lock, "WAIT_S", 0.3)
    (build_dir / "lock").write_text("")  # the live builder's own torch lock
    fd = os.open(build_dir / "kvbench-builder.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a live builder holds it (a separate open file: it conflicts)
    try:
        with caplog.at_level(logging.WARNING):
            assert not cpu_kernels._load()  # the pure-torch path, after the bound
    finally:
        os.close(fd)
    assert loads == []  # no second build beside the live one (nor a serial one)
    assert (build_dir / "lock").exists()  # the live builder's lock is left alone
    text = caplog.text
    assert f"waiting for another process building the CPU kernels (it holds {build_dir / 'kvbench-builder.lock'}" in text
    assert "CPU decode kernels not loaded (another process was still building the CPU kernels after 0 s" in text
