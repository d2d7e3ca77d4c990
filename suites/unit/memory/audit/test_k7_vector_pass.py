"""K7's vector pass over every live row (pool_checks._k7_suspects) clears only rows that
the row-by-row check (_k7_row) clears: K7 reports, in words and order, exactly what
reading each row alone reports, whatever corrupts the SWA map or the ledger."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mini_engine.memory.audit.pool_checks import _k7_row, check_k7
from mini_engine.memory.audit.record import Auditor
from mini_engine.memory.config import MemoryConfig
from mini_engine.memory.manager import KVManager

PS = 16


def swa_manager(lengths: list[int], evict: list[bool]) -> KVManager:
    mem = MemoryConfig(PS, 128, 4, 400, policy="aligned", free_policy="floor", prefix_cache="chunk",
                       swa_num_pages=96, window=32)
    m = KVManager(mem, Auditor("record"))
    for rid, (n, ev) in enumerate(zip(lengths, evict)):
        s = m.admit(rid)
        assert m.extend(s, n)
        m.commit(s, n)
        if ev:
            m.evict_swa(s, s.committed, interval=1)
    return m


def row_by_row(m: KVManager) -> list:
    return [v for s in m.states.values() if (v := _k7_row(m, 0, s)) is not None]


# A corruption: (request, position in its row, what the SWA map says there) or
# (request, SWA pages the ledger says it holds).
corruption = st.one_of(
    st.tuples(st.just("map"), st.integers(0, 3), st.integers(0, 399), st.integers(0, 96 * PS + PS - 1)),
    st.tuples(st.just("copy"), st.integers(0, 3), st.integers(0, 399), st.integers(0, 399)),
    st.tuples(st.just("held"), st.integers(0, 3), st.integers(-1, 12), st.just(0)),
)


@settings(max_examples=150, deadline=None)
@given(lengths=st.lists(st.integers(1, 200), min_size=1, max_size=4),
       evict=st.lists(st.booleans(), min_size=4, max_size=4),
       faults=st.lists(corruption, max_size=4))
def test_k7_vector_pass_reports_what_the_row_check_reports(lengths, evict, faults):
    m = swa_manager(lengths, evict)
    states = list(m.states.values())
    host, swa_map = m.req_to_token.host, m.swa.map_host
    for kind, i, a, b in faults:
        s = states[i % len(states)]
        if kind == "map":  # any SWA slot (or none) at one position of the row
            swa_map[host[s.row, min(a, s.allocated)]] = b
        elif kind == "copy":  # one position takes another position's SWA slot
            swa_map[host[s.row, min(a, s.allocated)]] = swa_map[host[s.row, min(b, s.allocated)]]
        else:
            m.ledger.held["swa"][s.row] = a
    assert [(v.rid, v.values) for v in check_k7(m, 0)] == [(v.rid, v.values) for v in row_by_row(m)]


def test_k7_clean_rows_report_nothing():
    m = swa_manager([40, 100, 200, 7], [True, False, True, True])
    assert check_k7(m, 0) == [] == row_by_row(m)
    assert np.count_nonzero(m.ledger.held["swa"]) == 4
