"""The unique-row free rule (SGLang 0.5.18's release) and release_syncs, numpy only.

0.5.18 frees the committed row through allocator.free() (a unique: sorted page ids, a
device sync) and the over-allocation by segment; under a free group SGLang makes one
unique over the group's slots, so one sync per group. With SWA, 0.5.18's SWAChunkCache
frees through its SWA allocator (full unique, then free_swa's page unique, mask and SWA
unique). Side by side with 0.5.18's own code: suites/unit/conform/test_sglang_0518.py and
test_swa_chunk_0518.py.
"""

from __future__ import annotations

from mini_engine.memory.config import MemoryConfig
from mini_engine.memory.manager import KVManager


def _manager(ps: int, free: str = "unique-row") -> KVManager:
    # The chunk cache: 0.5.18 frees through its unique only without a radix tree (with one,
    # RadixCache.cache_finished_req frees by segment).
    return KVManager(MemoryConfig(ps, 32, 4, 64, free_policy=free, prefix_cache="chunk"))


def _request(m: KVManager, rid: int, extent: int, committed: int):
    s = m.admit(rid)
    assert m.extend(s, extent)
    m.commit(s, committed)
    return s


def test_grouped_releases_pay_one_sync_and_put_segments_first():
    m = _manager(4)
    a = _request(m, "A", 10, 6)  # pages 1-3: committed [0, 6) on pages 1, 2; over-allocation page 3
    b = _request(m, "B", 7, 7)  # pages 4, 5, committed only
    with m.free_group():
        m.release(b)
        m.release(a)
    # the group end: the unique pages (sorted) in front of the list, then the segments' in front of them
    assert m.full.free_page_ids()[:5].tolist() == [3, 1, 2, 4, 5]
    assert m.release_syncs == 1 and m.syncs == 2 and m.leaked_pages("full") == 0


def test_lone_releases_pay_a_sync_each():
    m = _manager(16)
    for rid in range(3):
        _request(m, rid, 40, 33)
    for s in list(m.tables.states.values()):
        m.release(s)
    assert m.release_syncs == 3 and m.leaked_pages("full") == 0


def test_page_size_1_frees_slots_as_given_without_a_unique():
    m = _manager(1)
    s = _request(m, "A", 5, 3)
    with m.free_group():
        m.release(s)
    assert m.release_syncs == 0 and m.full.num_free_pages == 32


def test_segment_rule_pays_no_sync_and_orders_otherwise():
    m, u = _manager(4, "segment"), _manager(4)
    for mgr in (m, u):
        a, b = _request(mgr, "A", 10, 6), _request(mgr, "B", 7, 7)
        with mgr.free_group():
            mgr.release(b)
            mgr.release(a)
    assert m.release_syncs == 0
    assert m.full.free_page_ids()[:5].tolist() != u.full.free_page_ids()[:5].tolist()


# -- with SWA: 0.5.18's SWAChunkCache on its SWA allocator -------------------------------

def _swa_manager(ps: int) -> KVManager:
    return KVManager(MemoryConfig(ps, 128 // ps, 4, 64, free_policy="unique-row", prefix_cache="chunk",
                                  swa_num_pages=128 // ps, window=8))


def test_swa_release_frees_both_pools_by_unique_and_skips_the_evicted_window():
    m = _swa_manager(4)
    a = _request(m, "A", 30, 21)  # full and SWA pages 1-8: committed [0, 21), over-allocation [24, 30)
    b = _request(m, "B", 10, 10)  # pages 9-11
    assert m.evict_swa(a, interval=1) == 3  # cursor 12: free_swa of [0, 12), SWA pages 1-3
    assert m.swa.allocator.free_page_ids()[:4].tolist() == [1, 2, 3, 12]
    assert m.release_syncs == 3  # free_swa: its page unique, the mask of mapped slots, the SWA unique
    with m.free_group():
        m.release(b)
        m.release(a)
    # One group: the full unique over both rows (pages 1-11, sorted, in front), then free_swa
    # over the same slots: the evicted pages read 0 and are skipped, the rest sorted in front.
    assert m.full.free_page_ids()[:12].tolist() == list(range(1, 13))
    assert m.swa.allocator.free_page_ids()[:12].tolist() == [4, 5, 6, 7, 8, 9, 10, 11, 1, 2, 3, 12]
    assert m.release_syncs == 3 + 4  # full unique; free_swa's page unique and mask; SWA unique
    assert m.leaked_pages("full") == m.leaked_pages("swa") == 0 and not m.swa.map_host.any()


def test_swa_lone_release_pays_per_call_and_page_size_1_only_the_masks():
    m = _swa_manager(4)
    _request(m, "A", 30, 21)
    m.release(next(iter(m.tables.states.values())))
    assert m.release_syncs == 2 * 4  # the committed row and the over-allocation: two composite frees
    m = _swa_manager(1)
    _request(m, "A", 30, 21)
    m.release(next(iter(m.tables.states.values())))
    assert m.release_syncs == 2  # ps 1: no unique anywhere, one mask per composite free
    assert m.swa.allocator.free_page_ids()[-30:].tolist() == list(range(1, 31))  # appended in row order


def test_swa_segment_rule_keeps_the_stride_release():
    m = KVManager(MemoryConfig(4, 32, 4, 64, free_policy="segment", prefix_cache="chunk", swa_num_pages=32, window=8))
    a = _request(m, "A", 30, 21)
    m.evict_swa(a, interval=1)
    m.release(a)
    assert m.release_syncs == 0
