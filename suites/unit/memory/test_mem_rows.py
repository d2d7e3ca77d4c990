"""Per-row length arrays: a state is a view of its row, a batch commits in one pass,
a whole-page allocation equals the general one, a request's step counters follow its row."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mini_engine.memory.audit.record import Auditor
from mini_engine.memory.config import MemoryConfig
from mini_engine.memory.kv_state import ReqKVState
from mini_engine.memory.manager import KVManager
from mini_engine.memory.pool.allocator import PagedAllocator
from mini_engine.request import Request, Tally


def _manager(n: int = 6, audit: str = "record") -> tuple[KVManager, list[ReqKVState]]:
    m = KVManager(MemoryConfig(16, 256, 8, 400), Auditor(audit))
    states = []
    for i in range(n):
        s = m.admit(f"r{i}")
        assert m.extend(s, 10 + 7 * i)
        m.commit(s, 5 + 3 * i)
        states.append(s)
    return m, states


def test_a_state_reads_and_writes_its_row():
    m, states = _manager()
    s = states[2]
    assert (s.committed, s.allocated) == (int(m.rows.committed[s.row]), int(m.rows.allocated[s.row]))
    assert type(s.committed) is int and s.writer == "prefill" and s.aligned == m.rules.aligns("extend")
    m.rows.committed[s.row] += 1
    assert s.committed == 12


def test_a_released_state_keeps_its_values_when_its_row_is_reused():
    m, states = _manager()
    s = states[1]
    before = (s.committed, s.allocated, s.writer)
    row = m.release(s)
    again = m.admit("new")
    assert again.row == row and (again.committed, again.allocated, again.writer) == (0, 0, "")
    assert m.extend(again, 40)
    m.commit(again, 33)
    assert (s.committed, s.allocated, s.writer) == before and s.released


def test_a_standalone_state_keeps_its_own_values():
    a, b = ReqKVState("a", 3, committed=4, allocated=16), ReqKVState("b", 3)
    b.allocated = 8
    assert (a.committed, a.allocated, b.allocated) == (4, 16, 8)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-2, 40), min_size=6, max_size=6))
def test_commit_batch_equals_one_commit_per_state(counts):
    m1, s1 = _manager()
    m2, s2 = _manager()
    for s, n in zip(s1, counts):
        m1.commit(s, n)
    m2.commit_batch(s2, np.array(counts))
    assert [s.committed for s in s1] == [s.committed for s in s2]
    assert m1.reserved_unwritten_slots == m2.reserved_unwritten_slots
    assert sorted((v.rid, v.values["n"]) for v in m1.auditor.records) == \
        sorted((v.rid, v.values["n"]) for v in m2.auditor.records)


@settings(max_examples=80, deadline=None)
@given(st.sampled_from([2, 4, 16]), st.lists(st.tuples(st.integers(0, 6), st.integers(0, 4)), min_size=1, max_size=8))
def test_whole_page_allocation_equals_the_general_one(ps, reqs):
    prefix = np.array([p * ps for p, _ in reqs], dtype=np.int64)
    seq = prefix + np.array([g * ps for _, g in reqs], dtype=np.int64)
    last = np.full(len(reqs), -1, dtype=np.int64)
    fast, general = PagedAllocator(64, ps), PagedAllocator(64, ps)
    a = fast.allocate(prefix, seq, last, trusted=True, whole=True)
    b = general.allocate(prefix, seq, last, trusted=True, whole=False)
    assert (a is None) == (b is None)
    if a is None:
        return
    assert a.page_starts is not None and b.page_starts is None
    for name in ("slots", "lens", "pages", "pages_per_req", "positions"):
        assert getattr(a, name).tolist() == getattr(b, name).tolist(), name
    assert [x.tolist() for x in a.split()] == [x.tolist() for x in b.split()]


def test_step_counters_follow_the_row_while_bound():
    r = Request(rid=1, prompt=[1, 2], max_new_tokens=8)
    r.spec_steps = 2
    tally = Tally(4)
    r.bind(tally, 3)
    tally.spec_steps[[3]] += 1
    tally.accepted[[3]] += 5
    r.decode_batches += 1
    assert (r.spec_steps, r.accepted, r.decode_batches) == (3, 5, 1)
    r.unbind()
    assert tally.spec_steps.tolist() == [0, 0, 0, 0] and tally.decode_batches.tolist() == [0, 0, 0, 0]
    assert (r.spec_steps, r.accepted, r.decode_batches) == (3, 5, 1)
    r.bind(tally, 0)  # a new row starts from the request's own counts
    tally.accepted[[0]] += 2
    assert r.accepted == 7


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 23), st.integers(1, 9)), max_size=12),
       st.permutations(range(4)))
def test_moving_rows_equals_a_whole_row_move(writes, perm):
    """move_rows moves only the columns up to the last one the rows hold; the table equals a
    whole-row move, and the change log names every entry that differs afterwards (the mirror
    that follows it ends equal to the host)."""
    from mini_engine.memory.pool.req_to_token import ReqToTokenPool

    pool = ReqToTokenPool(6, 24)
    for row, col, val in writes:  # rows 4 and 5 stay out of the move; a row may be all zero
        pool.host[row, col] = val
    mirror = pool.host.copy()
    pool.changes.follow()
    old = [0, 1, 2, 3]
    new = [old[i] for i in perm]
    want = pool.host.copy()
    want[new] = pool.host[old]
    pool.move_rows(old, new)
    assert np.array_equal(pool.host, want)
    logged = pool.changes.drain()
    mirror.reshape(-1)[logged] = pool.host.reshape(-1)[logged]
    assert np.array_equal(mirror, pool.host)


def test_moving_rows_refuses_a_new_order_that_is_not_a_permutation():
    """The column bound holds only for the same rows in another order (KVManager.batch_rows's)."""
    from mini_engine.memory.pool.req_to_token import ReqToTokenPool

    pool = ReqToTokenPool(4, 8)
    pool.host[0, 3] = 7
    with pytest.raises(ValueError, match="permutation"):
        pool.move_rows([0, 1], [1, 2])
    assert pool.host[0, 3] == 7
