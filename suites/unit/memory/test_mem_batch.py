"""BatchArrays: filter, merge, planned extents and commits follow the request states (K10)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from mini_engine.memory import sizing
from mini_engine.memory.audit.pool_checks import check_k10
from mini_engine.memory.audit.record import Auditor
from mini_engine.memory.batch import BatchArrays
from mini_engine.memory.config import MemoryConfig
from mini_engine.memory.manager import KVManager
from mini_engine.memory.rules import MemoryRules


@pytest.fixture
def mgr():
    m = KVManager(MemoryConfig(16, 128, 8, 400), Auditor("record"))
    states = []
    for i in range(6):
        s = m.admit(f"r{i}")
        m.extend(s, 10 + 7 * i)
        m.commit(s, 10 + 7 * i)
        states.append(s)
    return m, states


def test_filter_and_merge(mgr):
    m, states = mgr
    batch = BatchArrays.from_states(states[:4])
    batch.filter([3, 1])
    assert batch.rids == ["r3", "r1"]
    assert batch.rows.tolist() == [states[3].row, states[1].row]
    batch.merge(BatchArrays.from_states(states[4:]))
    assert batch.rids == ["r3", "r1", "r4", "r5"]
    assert batch.rows.tolist() == [s.row for s in (states[3], states[1], states[4], states[5])]
    assert batch.committed.tolist() == [s.committed for s in (states[3], states[1], states[4], states[5])]
    assert check_k10(m, 0, batch) == []


def test_plan_and_commit_follow_a_step_without_reading_the_states(mgr):
    m, states = mgr
    batch = BatchArrays.from_states(states)
    assert m.prepare(states, 32)
    assert check_k10(m, 0, batch)  # the reservation moved the extents: the batch must follow
    batch.set_allocated(batch.plan_extents(32, m.ps, m.step_aligned, m.mem.row_width))
    assert check_k10(m, 1, batch) == []
    counts = np.array([3, 1, 4, 1, 5, 9])
    for s, n in zip(states, counts.tolist()):
        m.commit(s, n)
    assert {v.rid for v in check_k10(m, 2, batch)} == {s.rid for s in states}
    batch.commit(counts)
    assert check_k10(m, 3, batch) == []
    batch.commit(np.eye(1, 6, 2, dtype=np.int64)[0])  # one count too many: that request is off
    assert [v.rid for v in check_k10(m, 4, batch)] == ["r2"]


def test_batch_arrays_are_host_numpy(mgr):
    _, states = mgr
    batch = BatchArrays.from_states(states)
    assert all(type(getattr(batch, name)) is np.ndarray for name in ("rows", "committed", "allocated"))
    assert not any(name.endswith("_device") for name in vars(batch))


def test_wrong_lengths_are_refused(mgr):
    _, states = mgr
    batch = BatchArrays.from_states(states)
    with pytest.raises(ValueError):
        batch.commit(np.ones(5, dtype=np.int64))
    with pytest.raises(ValueError):
        batch.set_allocated(np.ones(7, dtype=np.int64))


def test_a_batch_step_changes_only_its_own_arrays():
    m = KVManager(MemoryConfig(4, 256, 8, 400), Auditor("raise"))
    states = []
    for i in range(5):
        s = m.admit(i)
        m.extend(s, 9 + i)
        m.commit(s, 9 + i)
        states.append(s)
    batch = BatchArrays.from_states(states[:3])
    batch.filter([2, 0])
    batch.merge(BatchArrays.from_states(states[3:]))
    batch.set_allocated(batch.plan_extents(8, 4, True, 400))
    batch.commit(np.arange(len(batch)))
    assert batch.committed.tolist() == [11 + 0, 9 + 1, 12 + 2, 13 + 3]
    assert [s.committed for s in states] == [9, 10, 11, 12, 13]  # the states move only through the manager


@settings(max_examples=60, deadline=None)
@given(ps=st.sampled_from([1, 2, 16, 64]), policy=st.sampled_from(["aligned", "unaligned"]),
       reserve=st.integers(1, 80), lens=st.lists(st.integers(1, 200), min_size=1, max_size=6),
       extra=st.lists(st.integers(0, 40), min_size=6, max_size=6), overflow=st.booleans())
def test_plan_extents_equal_the_managers_reservation(ps, policy, reserve, lens, extra, overflow):
    rules = replace(MemoryRules.of(policy), row_overflow=overflow)
    m = KVManager(MemoryConfig(ps, 4096, 8, 300, rules=rules), Auditor("record"))
    states = []
    for n, e in zip(lens, extra):
        s = m.admit(len(states))
        m.extend(s, min(n + e, 300))
        m.commit(s, n)
        states.append(s)
    batch = BatchArrays.from_states(states)
    # Cut at the row's end, or written past it as SGLang does (memory.overflow).
    plan = batch.plan_extents(reserve, ps, m.step_aligned, None if overflow else m.mem.row_width)
    expect = [sizing.plan_extent(s.allocated, s.committed, reserve, ps, policy) for s in states]
    assert plan.tolist() == (expect if overflow else [min(x, 300) for x in expect])
    assert m.prepare(states, reserve)
    assert plan.tolist() == [s.allocated for s in states]  # clamped rows included (K4 reports those)


def test_k10_catches_a_batch_that_drifted(mgr):
    m, states = mgr
    batch = BatchArrays.from_states(states)
    batch.committed[2] += 1
    assert [(v.rid, v.values["reason"]) for v in check_k10(m, 0, batch)] == [("r2", "batch != request state")]
    assert [v.id for v in m.check(0, batch)] == ["K10"]
