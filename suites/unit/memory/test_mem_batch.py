"""BatchArrays: filter/merge keep host arrays equal to their device twins (K10)."""

from __future__ import annotations

import numpy as np
import pytest

from mini_engine.memory import Auditor, KVManager, MemoryConfig
from mini_engine.memory.batch import BatchArrays
from mini_engine.memory.invariants import check_k10


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
    for name in ("rows", "committed", "allocated"):
        assert np.array_equal(getattr(batch, name), getattr(batch, f"{name}_device").numpy())
    assert check_k10(m, 0, batch) == []


def test_sync_from_after_a_step(mgr):
    m, states = mgr
    batch = BatchArrays.from_states(states)
    assert m.prepare(states, 32)
    for s in states:
        m.commit(s, 3)
    assert check_k10(m, 0, batch)  # stale against the request states
    batch.sync_from(states)
    assert check_k10(m, 1, batch) == []
    with pytest.raises(ValueError):
        batch.sync_from(states[::-1])


def test_k10_catches_a_device_twin_that_drifted(mgr):
    m, states = mgr
    batch = BatchArrays.from_states(states)
    batch.committed_device[2] += 1
    assert [v.values["array"] for v in check_k10(m, 0, batch)] == ["committed"]
    assert [v.id for v in m.check(0, batch)] == ["K10"]
