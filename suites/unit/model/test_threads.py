"""KVBENCH_THREADS: a fixed thread count, or one line naming what it allows; more threads
only where that many cores are idle."""

from __future__ import annotations

import pytest
import torch

from mini_engine.errors import ConfigError
from mini_engine.model import threads
from mini_engine.model.threads import ThreadChoice


@pytest.mark.parametrize("value", ["abc", "0", "-1", "1.5"])
def test_a_bad_thread_count_is_one_line(monkeypatch, value):
    monkeypatch.setenv("KVBENCH_THREADS", value)
    with pytest.raises(ConfigError, match="KVBENCH_THREADS must be a positive integer"):
        ThreadChoice()


def test_a_fixed_thread_count_is_kept(monkeypatch):
    monkeypatch.setenv("KVBENCH_THREADS", "1")
    assert ThreadChoice().fixed == 1


@pytest.mark.parametrize("idle, most", [(2.0, 2), (1.6, 2), (1.4, 1), (0.9, 1)])
def test_more_threads_only_where_that_many_cores_are_idle(monkeypatch, idle, most):
    """Sampled idle cores decide (a core another job keeps busy leaves one thread), not the
    load average, which still counts a job that ended a minute ago."""
    monkeypatch.delenv("KVBENCH_THREADS", raising=False)
    monkeypatch.setattr(threads, "STARTUP_THREADS", 2)
    monkeypatch.setattr(threads, "_idle_cores", lambda window: idle)
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (9.0, 9.0, 9.0))
    before = torch.get_num_threads()
    try:
        assert ThreadChoice().most == most
    finally:
        torch.set_num_threads(before)


def test_idle_cores_read_from_proc_stat_or_the_load_average(monkeypatch):
    idle = threads._idle_cores(0.02)
    assert idle is None or 0.0 <= idle <= (threads.os.cpu_count() or 1) + 1e-9
    monkeypatch.setattr(threads, "_idle_cores", lambda window: None)  # no /proc/stat
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (1.0, 1.0, 1.0))
    assert not threads._busy(2)
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (2.0, 1.0, 1.0))
    assert threads._busy(2)
