"""The pre-35265 profile's SWA release and window eviction against SGLang 0.5.18's own classes.

0.5.18 runs hybrid SWA models without a radix tree on ``SWAChunkCache`` (its registry's
pick when the radix cache is off) over ``SWATokenToKVPoolAllocator``. Both modules
import the model stack at load time, so the two classes (and ``ChunkCache``, whose
``cache_finished_req`` the SWA cache inherits) are compiled from the installed source
over SGLang's own paged and token allocators; ``release_kv_cache`` and
``free_swa_out_of_window_slots`` likewise. The same requests are allocated, evicted and
released on kvbench's KVManager and on that allocator: the slots handed out, the SWA
cursor, both free lists (order included) and the syncs must agree, a sync being each
``torch.unique`` and each boolean-mask index (``swa_indices[swa_indices > 0]``) the
release and eviction paths run, as on a GPU.

Skipped unless 0.5.18 is the installed SGLang (``sg0518``); CI runs it in its 0.5.18 venv.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mini_engine.memory.config import MemoryConfig
from mini_engine.memory.manager import KVManager
from sglang_source import classes, functions

torch = pytest.importorskip("torch")  # SGLang's own dependency: without it no SGLang loads either


class _SWAPool:
    """Stands in for 0.5.18's SWAKVPool: the allocator registers its full-to-SWA map here."""

    full_kv_pool = swa_kv_pool = None

    def register_mapping(self, mapping):
        self.full_to_swa_index_mapping = mapping

    def translate_loc_from_full_to_swa(self, kv_indices):
        return self.full_to_swa_index_mapping[kv_indices]


class _PrefixCache:
    """BasePrefixCache's answers release_kv_cache asks (its module imports the model stack)."""

    def supports_mamba(self):
        return False


@pytest.fixture(scope="module")
def sglang_swa(sg0518):
    """0.5.18's SWATokenToKVPoolAllocator, SWAChunkCache, release_kv_cache and window eviction."""
    from sglang.srt.mem_cache.allocator.base import BaseTokenToKVPoolAllocator
    from sglang.srt.utils.common import get_num_new_pages

    ns = classes("sglang.srt.mem_cache.allocator.swa", {"SWATokenToKVPoolAllocator"}, {
        "torch": torch, "BaseTokenToKVPoolAllocator": BaseTokenToKVPoolAllocator,
        "PagedTokenToKVPoolAllocator": sg0518.paged.PagedTokenToKVPoolAllocator,
        "TokenToKVPoolAllocator": sg0518.token.TokenToKVPoolAllocator,
        "BaseSWAKVPool": _SWAPool, "_is_npu": False, "get_num_new_pages": get_num_new_pages})
    allocator = ns["SWATokenToKVPoolAllocator"]
    cache_ns = classes("sglang.srt.mem_cache.chunk_cache", {"ChunkCache", "SWAChunkCache"}, {
        "torch": torch, "BasePrefixCache": _PrefixCache, "SWATokenToKVPoolAllocator": allocator,
        "DeepSeekV4HiSparseTokenToKVPoolAllocator": type("HiSparse", (), {})})
    assert "cache_finished_req" not in vars(cache_ns["SWAChunkCache"])  # it inherits ChunkCache's
    fns = {"torch": torch, "Req": object, "BasePrefixCache": object, "Optional": object,
           "ReqToTokenPool": object, "BaseTokenToKVPoolAllocator": object,
           "get_spec": lambda: SimpleNamespace(speculative_algorithm="DFLASH"),
           "get_serving": lambda: SimpleNamespace(strip_thinking_cache=False),
           "ceil_align": lambda x, y: -(-x // y) * y, "HybridReqToTokenPool": type("Hybrid", (), {})}
    functions("sglang.srt.mem_cache.common",
              {"release_kv_cache", "_release_overallocated_kv_indices", "free_swa_out_of_window_slots"}, fns)
    return SimpleNamespace(allocator=allocator, cache=cache_ns["SWAChunkCache"], **fns)


class _Syncs:
    """Counts the ops that make the host wait for the device: torch.unique, boolean-mask indexing."""

    def __init__(self):
        self.n = 0

    @contextlib.contextmanager
    def counting(self):
        unique, getitem = torch.unique, torch.Tensor.__getitem__

        def counted_unique(*a, **kw):
            self.n += 1
            return unique(*a, **kw)

        def counted_getitem(t, index):
            if isinstance(index, torch.Tensor) and index.dtype == torch.bool:
                self.n += 1  # a data-dependent shape: nonzero on the device, then a copy to the host
            return getitem(t, index)

        torch.unique, torch.Tensor.__getitem__ = counted_unique, counted_getitem
        try:
            yield self
        finally:
            torch.unique, torch.Tensor.__getitem__ = unique, getitem


class Side:
    """One run on 0.5.18's classes: its allocator, its chunk cache, requests by row."""

    def __init__(self, sg, num_pages: int, swa_pages: int, ps: int, window: int, width: int, max_reqs: int):
        self.sg, self.ps, self.window = sg, ps, window
        self.alloc = sg.allocator(num_pages * ps, swa_pages * ps, ps, torch.int64, "cpu", _SWAPool(), False)
        self.rows = torch.zeros((max_reqs, width), dtype=torch.int64)
        self.pool = SimpleNamespace(req_to_token=self.rows, free=lambda req: None)
        self.cache = sg.cache(SimpleNamespace(req_to_token_pool=self.pool, token_to_kv_pool_allocator=self.alloc,
                                              page_size=ps, sliding_window_size=window, chunked_prefill_size=-1))
        self.reqs = {}
        self.syncs = _Syncs()

    def extend(self, row: int, extent: int) -> list[int]:
        """A fresh request's first extend, as 0.5.18's alloc_extend (alloc at ps 1)."""
        if self.ps == 1:
            out = self.alloc.alloc(extent)
        else:
            zero, seq, last = (torch.tensor([v], dtype=torch.int64) for v in (0, extent, -1))
            out = self.alloc.alloc_extend(zero, zero.clone(), seq, seq.clone(), last, extent)
        self.rows[row, :extent] = out
        self.reqs[row] = SimpleNamespace(req_pool_idx=row, kv=SimpleNamespace(kv_allocated_len=extent,
                                         swa_evicted_seqlen=0), cache_protected_len=0,
                                         skip_radix_cache_insert=False)
        return out.tolist()

    def commit(self, row: int, committed: int) -> None:
        self.reqs[row].effective_kv_committed_len = lambda: committed

    def evict(self, rows_pre: list[tuple[int, int]], grouped: bool) -> None:
        with self.syncs.counting(), self._group(grouped):
            for row, pre_len in rows_pre:
                self.sg.free_swa_out_of_window_slots(
                    self.reqs[row], pre_len, sliding_window_size=self.window, page_size=self.ps,
                    req_to_token_pool=self.pool, token_to_kv_pool_allocator=self.alloc, is_chunk_cache=True)

    def release(self, rows: list[int], grouped: bool) -> None:
        with self.syncs.counting(), self._group(grouped):
            for row in rows:
                self.sg.release_kv_cache(self.reqs.pop(row), self.cache)

    @contextlib.contextmanager
    def _group(self, grouped: bool):
        if grouped:
            self.alloc.free_group_begin()
        yield
        if grouped:
            self.alloc.free_group_end()

    def free_lists(self) -> tuple[list[int], list[int]]:
        return self.alloc.full_attn_allocator.free_pages.tolist(), self.alloc.swa_attn_allocator.free_pages.tolist()


def _both(sg, ps: int, window: int, max_reqs: int, width: int = 96, num_pages: int | None = None):
    rows = (max_reqs * width) // ps
    # The property extends every row in full before it evicts a window, so its SWA pool holds
    # every row (3/4 of the full pool did not: 24 + 3 x 90 slots at ps 1 against 293, found by
    # hypothesis); the worked cases size theirs.
    swa_pages = num_pages * 3 // 4 + 2 if num_pages else rows + 2
    num_pages = num_pages or rows + 4
    mem = MemoryConfig(ps, num_pages, max_reqs, width, free_policy="unique-row", prefix_cache="chunk",
                       swa_num_pages=swa_pages, window=window)
    return KVManager(mem), Side(sg, num_pages, swa_pages, ps, window, width, max_reqs)


def _run_round(m, side, reqs, evict_grouped: bool, release_grouped: int) -> None:
    """Admit each (extent, committed, pre_len) request, evict its window at pre_len (one
    group or lone), release the first ``release_grouped`` in one group, the rest lone."""
    states = []
    for rid, (extent, committed, pre_len) in enumerate(reqs):
        s = m.admit(rid)
        assert m.extend(s, extent)
        m.commit(s, committed)
        assert side.extend(s.row, extent) == m.slots(s, 0, extent).tolist()
        side.commit(s.row, committed)
        states.append((s, pre_len))
    # the SWA slots 0.5.18 maps each full slot to are kvbench's
    assert (side.alloc.full_to_swa_index_mapping[:-1].numpy()[:len(m.swa.map_host)] == m.swa.map_host).all()
    with m.free_group() if evict_grouped else contextlib.nullcontext():
        for s, pre_len in states:
            m.evict_swa(s, pre_len, interval=1)
    side.evict([(s.row, pre_len) for s, pre_len in states], evict_grouped)
    assert [int(s.swa_evicted) for s, _ in states] == [side.reqs[s.row].kv.swa_evicted_seqlen for s, _ in states]
    rows = [s.row for s, _ in states]
    with m.free_group():
        for s, _ in states[:release_grouped]:
            m.release(s)
    side.release(rows[:release_grouped], grouped=True)
    for s, _ in states[release_grouped:]:
        m.release(s)
    side.release(rows[release_grouped:], grouped=False)


def _agree(m, side) -> None:
    full, swa = side.free_lists()
    assert full == m.full.free_page_ids().tolist()
    assert swa == m.swa.allocator.free_page_ids().tolist()
    assert side.syncs.n == m.release_syncs
    assert not m.swa.map_host.any() and not side.alloc.full_to_swa_index_mapping[:-1].any()


def test_worked_example(sglang_swa):
    """ps 4, window 8. A: 30 slots, committed 21, evicted at 21 (cursor 12: SWA pages 1-3 back);
    B: 10 slots, committed 10. Both released in one group."""
    m, side = _both(sglang_swa, 4, 8, 2, num_pages=32)
    _run_round(m, side, [(30, 21, 21), (10, 10, 0)], evict_grouped=False, release_grouped=2)
    _agree(m, side)
    # eviction: free_swa of positions [0, 12): SWA pages 1-3 (unique, mask, unique: 3 syncs);
    # release group: the full unique over A's [0, 21) + [24, 30) and B's [0, 10) (pages 1-11),
    # then free_swa over the same slots (unique, mask; evicted pages read 0) and the SWA unique
    # (pages 4-11): 4 syncs. SGLang's order: sorted pages in front of each list.
    assert m.full.free_page_ids()[:12].tolist() == list(range(1, 13))
    assert m.swa.allocator.free_page_ids()[:12].tolist() == [4, 5, 6, 7, 8, 9, 10, 11, 1, 2, 3, 12]
    assert m.release_syncs == 7


def test_lone_release_at_page_size_1_pays_the_mask_only(sglang_swa):
    m, side = _both(sglang_swa, 1, 4, 1, num_pages=64)
    _run_round(m, side, [(20, 17, 17)], evict_grouped=False, release_grouped=0)
    _agree(m, side)
    assert m.release_syncs == 3  # eviction's mask, the committed row's mask, the over-allocation's mask


_REQ = st.tuples(st.integers(1, 90), st.integers(0, 90), st.floats(0, 1))


@settings(max_examples=30, deadline=None)
@example(ps=1, window=1, rounds=[([(24, 0, 0.0), (90, 0, 0.0), (90, 0, 0.0), (90, 0, 0.0)], False, 0)])
@given(ps=st.sampled_from([1, 4, 16]), window=st.integers(1, 40),
       rounds=st.lists(st.tuples(st.lists(_REQ, min_size=1, max_size=4), st.booleans(), st.integers(0, 4)),
                       min_size=1, max_size=3))
def test_release_sequences_equal_0518s(sglang_swa, ps, window, rounds):
    """Rounds of requests (extent, committed <= extent, the eviction's pre_len as a share of
    committed): evicted lone or in one group, released partly in one group, partly lone.
    After every round both free lists (order included), the cursors and the syncs agree."""
    m, side = _both(sglang_swa, ps, window, 4)
    for reqs, evict_grouped, release_grouped in rounds:
        reqs = [(e, min(c, e), int(min(c, e) * f)) for e, c, f in reqs]
        _run_round(m, side, reqs, evict_grouped, release_grouped)
        _agree(m, side)
    assert m.leaked_pages("full") == 0 and m.leaked_pages("swa") == 0
    assert np.array_equal(np.sort(m.full.free_page_ids()), np.arange(1, m.full.num_pages + 1))


def test_the_radix_window_move_is_0518s_where_the_profile_allows_the_window(sglang_swa):
    """With the radix tree 0.5.18 moves a window to floor_ps(pre_len - max(window, ps)); kvbench
    has 0.5.23's rule (max(window, ps) rounded up to pages first). They agree for every window
    the pre-35265 profile accepts (whole pages, or at most one page) and differ for one it
    refuses (40 at ps 16: EngineConfig's one-line refusal)."""
    from mini_engine.memory.sizing import swa_evict_target

    def moved(ps: int, window: int, pre_len: int) -> int:
        req = SimpleNamespace(kv=SimpleNamespace(swa_evicted_seqlen=0), cache_protected_len=0, req_pool_idx=0)
        pool = SimpleNamespace(req_to_token=torch.zeros((1, 1024), dtype=torch.int64))
        sglang_swa.free_swa_out_of_window_slots(req, pre_len, sliding_window_size=window, page_size=ps,
                                                req_to_token_pool=pool,
                                                token_to_kv_pool_allocator=SimpleNamespace(free_swa=lambda s: None))
        return req.kv.swa_evicted_seqlen

    def ours(ps: int, window: int, pre_len: int) -> int:
        return swa_evict_target(pre_len, 0, window, ps, 1, "radix")

    for ps, window in ((1, 7), (4, 4), (4, 2), (16, 32), (16, 8), (64, 32), (16, 48)):
        for pre_len in range(0, 400, 3):
            assert moved(ps, window, pre_len) == ours(ps, window, pre_len), (ps, window, pre_len)
    assert any(moved(16, 40, n) != ours(16, 40, n) for n in range(0, 400, 3))
