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


def _scripted(monkeypatch, costs: dict[int, list[float]]):
    """A clock on which the forwards at n threads take costs[n] in turn (ms)."""
    now, taken = [0.0], {n: iter(c) for n, c in costs.items()}
    monkeypatch.setattr(threads, "_clock", lambda: now[0])
    monkeypatch.delenv("KVBENCH_THREADS", raising=False)

    def forward():
        n = torch.get_num_threads()
        now[0] += next(taken[n]) / 1e3
        return n
    return forward


def test_a_decisive_trial_chooses_early(monkeypatch):
    """Every sample at two threads but the first (it wakes the workers) under MARGIN x every
    one-thread sample: two threads from the sixth forward on, three one-thread trials spared."""
    forward = _scripted(monkeypatch, {2: [1.9, 1.0, 1.0] + [1.0] * 20, 1: [1.5, 1.5] + [1.5] * 20})
    before = torch.get_num_threads()
    try:
        choice = ThreadChoice(most=2)
        seen = [choice.run("decode", forward) for _ in range(12)]
        assert seen[:5] == [2, 1, 2, 1, 2] and set(seen[5:]) == {2} and choice.chosen["decode"] == 2
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("more", [[1.9, 1.0, 1.3, 1.0, 1.0], [1.9, 1.3, 1.0, 1.0, 1.0]])
def test_a_close_trial_runs_every_sample(monkeypatch, more):
    """One sample at two threads (after the first) within the margin of a one-thread one: no
    early choice; the medians of five each decide as before."""
    forward = _scripted(monkeypatch, {2: more + [1.0] * 20, 1: [1.5] * 25})
    before = torch.get_num_threads()
    try:
        choice = ThreadChoice(most=2)
        seen = [choice.run("decode", forward) for _ in range(12)]
        assert seen[:10].count(1) == 5 and seen[:10].count(2) == 5 and "decode" in choice.chosen
        assert set(seen[10:]) == {2}
    finally:
        torch.set_num_threads(before)


def test_thread_choice_measures_both_then_keeps_one(monkeypatch):
    """As long at either count: five trials each, alternating, then one thread for good
    (more threads must win by MARGIN); KVBENCH_THREADS=1 runs no trial."""
    forward = _scripted(monkeypatch, {2: [1.0] * 20, 1: [1.0] * 20})
    before = torch.get_num_threads()
    try:
        choice = ThreadChoice(most=2)
        seen = [choice.run("decode", forward) for _ in range(14)]
        assert seen[:10].count(1) == 5 and seen[:10].count(2) == 5  # alternated, five trials each
        assert set(seen[10:]) == {1} and choice.chosen["decode"] == 1
        monkeypatch.setenv("KVBENCH_THREADS", "1")
        assert {ThreadChoice(most=2).run("decode", torch.get_num_threads) for _ in range(4)} == {1}
    finally:
        torch.set_num_threads(before)
