"""The state checks run in vector passes over the live rows (invariants.Live); here they
meet the rules as DESIGN.md states them, request by request, on managers whose rows
were corrupted behind the writers at random: the same violations, values and order."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mini_engine.memory.audit.pool_checks import check_k1, check_k2, check_k3, check_k4, check_k6, check_k10
from mini_engine.memory.audit.record import Auditor
from mini_engine.memory.batch import BatchArrays
from mini_engine.memory.config import MemoryConfig
from mini_engine.memory.manager import KVManager

PS = 16


def reference(m: KVManager, seen: dict, batch: BatchArrays) -> list[tuple]:
    """K1-K4, K6 and K10 one request at a time; seen: row -> (state, extent, cursor) at the last check."""
    out = []
    for s in m.states.values():
        held = int(m.ledger.held["full"][s.row])
        # With a prefix tree the row's protected prefix is the tree's pages, not the request's.
        shared = s.protected // PS if m.prefix is not None else 0
        if (s.aligned and s.allocated % PS) or held != -(-s.allocated // PS) - shared:
            out.append(("K1", s.rid, {"allocated": s.allocated, "pages_held": held, "page_size": PS,
                                      "writer": s.writer, "stranded": held * PS - s.allocated}))
    for row, s in m.states.items():
        if row in seen and seen[row][0] is s and s.allocated < seen[row][1]:
            out.append(("K2", s.rid, {"old": seen[row][1], "new": s.allocated}))
    w = m.mem.row_width
    for s in m.states.values():
        if not (0 <= s.protected <= s.committed <= s.allocated <= w) or s.protected % PS:
            out.append(("K3", s.rid, {"protected": s.protected, "committed": s.committed,
                                      "allocated": s.allocated, "row_width": w}))
    for s in m.states.values():
        base, res = int(m.reserve_base[s.row]), int(m.reserve_of[s.row])
        if res and s.allocated < base + res:
            out.append(("K4", s.rid, {"allocated": s.allocated, "committed_at_prepare": base, "reserve": res}))
    for row, s in m.states.items():
        prev = seen[row][2] if row in seen else 0
        back = row in seen and seen[row][0] is s and s.swa_evicted < prev
        if s.swa_evicted < 0 or s.swa_evicted % PS or back:
            out.append(("K6", s.rid, {"value": s.swa_evicted, "previous": prev, "page_size": PS}))
    for i, row in enumerate(batch.rows.tolist()):
        s = m.states.get(row)
        if s is None or s.rid != batch.rids[i] or s.committed != batch.committed[i] \
                or s.allocated != batch.allocated[i]:
            out.append(("K10", batch.rids[i], {"row": row, "reason": "batch != request state"}))
    return out


def vector(m: KVManager, step: int, batch: BatchArrays) -> list[tuple]:
    found = (check_k1(m, step) + check_k2(m, step) + check_k3(m, step) + check_k4(m, step)
             + check_k6(m, step) + check_k10(m, step, batch))
    return [(v.id, v.rid, v.values) for v in found]


FIELDS = ("allocated", "committed", "protected", "swa_evicted", "reserve_base", "rid")
corruption = st.tuples(st.integers(0, 5), st.sampled_from(FIELDS), st.integers(-20, 200))


@settings(max_examples=60, deadline=None)
@given(lens=st.lists(st.integers(1, 90), min_size=1, max_size=6),
       rounds=st.lists(st.lists(corruption, max_size=4), min_size=1, max_size=3),
       release=st.integers(0, 6))
def test_vector_state_checks_equal_the_per_request_rules(lens, rounds, release):
    m = KVManager(MemoryConfig(PS, 64, 8, 128), Auditor("record"))
    states = [m.admit(f"r{i}") for i in range(len(lens))]
    for s, n in zip(states, lens):
        assert m.extend(s, n)
        m.commit(s, n - n // 3)
    assert m.prepare(states, 8)
    batch = BatchArrays.from_states(states)
    seen: dict = {}
    for step, bad in enumerate(rounds):
        if step == 1 and release < len(states):
            m.release(states[release])  # a row leaves: its batch row is stale, its seen entry forgotten
            seen.pop(states[release].row, None)
            states.append(m.admit("new"))  # and a new request takes the row (the stack hands it back)
            assert states[-1].row == states[release].row and m.extend(states[-1], 20)
        for i, field, value in bad:
            s = states[i % len(states)]
            if s.released:
                continue
            if field == "reserve_base":
                m.reserve_base[s.row] = value
            elif field == "rid":
                batch.rids[i % len(batch.rids)] = f"x{value}"
            else:
                setattr(s, field, value)
        want = reference(m, seen, batch)
        assert vector(m, step, batch) == want
        m.check(step, batch)  # the manager's own pass records what this check saw
        seen = {row: (s, s.allocated, s.swa_evicted) for row, s in m.states.items()}


def test_a_reused_row_is_not_compared_with_its_last_request():
    # K2 and K6 compare a state with itself: a request that takes a released row starts
    # with no previous extent or cursor, whatever the row's last request had.
    m = KVManager(MemoryConfig(PS, 16, 2, 128, swa_num_pages=16, window=16), Auditor("record"))
    old = m.admit("old")
    assert m.pd_prealloc(old, 60) and old.swa_evicted == 32
    assert m.check(0) == []
    m.release(old)
    new = m.admit("new")
    assert new.row == old.row and m.extend(new, 20)
    new.swa_evicted = 8  # not a page boundary: K6, with nothing before it
    found = [v for v in m.check(1) if v.id in ("K2", "K6")]
    assert [(v.id, v.rid, v.values["previous"]) for v in found] == [("K6", "new", 0)]
