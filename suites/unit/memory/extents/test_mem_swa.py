"""SWA pool, window eviction and the PD prealloc evict floor (K6 at the write)."""

from __future__ import annotations

import numpy as np
import pytest

from mini_engine.memory.audit.record import Auditor
from mini_engine.memory.config import MemoryConfig
from mini_engine.memory.manager import KVManager


def make(mode="record", ps=16, window=32, policy="aligned", free_policy="floor"):
    mem = MemoryConfig(ps, 64, 4, 400, policy=policy, free_policy=free_policy, prefix_cache="chunk",
                       swa_num_pages=64, window=window)
    aud = Auditor(mode)
    return KVManager(mem, aud), aud


def prefilled(m, n):
    s = m.admit(0)
    assert m.extend(s, n)
    m.commit(s, n)
    return s


def test_pd_prealloc_worked_example():
    m, aud = make()
    s = m.admit("pd")
    assert m.pd_prealloc(s, 50)
    assert s.swa_evicted == 16 and s.committed == 50 and s.allocated == 64
    assert m.pages_held == 4 and m.swa_pages_held == 3  # SWA only for positions [16, 64)
    row = m.req_to_token.host[s.row]
    assert not m.swa.map_host[row[:16]].any() and m.swa.map_host[row[16:64]].all()
    assert m.check(0) == []


def test_window_eviction_moves_by_whole_pages_and_never_back():
    m, aud = make()
    s = m.admit(0)
    assert m.extend(s, 40)
    m.commit(s, 40)
    assert m.evict_swa(s, s.committed, interval=1) == 0 and s.swa_evicted == 0  # floor(8) = 0
    assert m.extend(s, 70)
    m.commit(s, 30)  # committed 70: floor_ps(38) = 32
    assert m.evict_swa(s, s.committed, interval=1) == 2 and s.swa_evicted == 32
    assert m.swa_pages_held == 3
    assert m.evict_swa(s, s.committed, interval=1) == 0
    assert m.check(0) == []
    m.release(s)
    assert m.leaked_pages() == 0 and m.check(1) == []


@pytest.mark.parametrize("free_policy", ["floor", "dedup"])
def test_release_frees_swa_above_the_cursor(free_policy):
    m, aud = make(free_policy=free_policy)
    s = m.admit(0)
    assert m.pd_prealloc(s, 100)
    assert m.prepare([s], 32)
    m.commit(s, 20)
    m.evict_swa(s, s.committed, interval=1)
    m.release(s)
    assert m.num_free_pages == 64 and m.swa.allocator.num_free_pages == 64
    assert not m.swa.map_host.any()
    assert m.check(0) == [] and aud.total == 0


def test_unaligned_swa_leaks_under_floor():
    m, aud = make(policy="unaligned")
    s = m.admit(0)
    assert m.pd_prealloc(s, 50)
    m.release(s)
    assert m.leaked_pages("full") == 1 and m.leaked_pages("swa") == 1
    ids = [v.id for v in m.check(0)]
    assert ids.count("K8") == 2


def test_k7_catches_a_stale_mapping():
    m, aud = make()
    s = prefilled(m, 64)
    m.evict_swa(s, s.committed, interval=1)
    row = m.req_to_token.host[s.row]
    m.swa.map_host[row[0]] = 99  # a stale SWA copy below the cursor
    assert [v.id for v in m.check(0)] == ["K7"]
    assert isinstance(m.swa.map_host, np.ndarray)


def test_k7_catches_swa_pages_kept_below_the_cursor(monkeypatch):
    m, aud = make()
    s = prefilled(m, 80)
    # An eviction that moves the cursor and clears the map but frees nothing: the pages
    # stay held with no position above the cursor using them.
    monkeypatch.setattr(m.swa.allocator, "free_segment", lambda *a, **k: np.empty(0, dtype=np.int64))
    m.evict_swa(s, s.committed, interval=1)
    assert s.swa_evicted == 48
    found = m.check(0)
    assert [v.id for v in found] == ["K7"] and "held" in found[0].values["reason"]


def test_k7_catches_two_pages_sharing_one_swa_page():
    m, aud = make()
    s = prefilled(m, 32)
    row = m.req_to_token.host[s.row]
    first = m.swa.map_host[row[:16]]
    m.swa.map_host[row[16:32]] = first  # positions 16..31 alias the SWA page of 0..15
    found = m.check(0)
    assert [v.id for v in found] == ["K7"] and "share one SWA page" in found[0].values["reason"]
