"""A prefill step allocates its chunks in one call, as SGLang's alloc_for_extend does.

SGLang 0.5.23 builds one ScheduleBatch per prefill step and alloc_for_extend makes one
alloc_extend for all of its requests. Without need_sort that hands out the same pages as
one call per chunk (alloc_extend takes pages from the front of the free list, request by
request); with need_sort (the decode side of PD) its merge test reads the batch's total:
staged frees are merged back, sorted, when extend_tokens // ps + batch + 1 exceeds the
free list (PagedTokenToKVPoolAllocator.alloc_extend).

Worked case (ps 4, 8 pages, need_sort): A takes pages 1-2, B pages 3-4; B then A are
released, so [3, 4, 1, 2] are staged and [5, 6, 7, 8] are free. Then a batch of D and
E, 4 tokens each. One call: 8 // 4 + 2 + 1 = 5 > 4 merges first, the free list becomes
[1, ..., 8], and D, E get pages 1 and 2 (slots 4-7, 8-11). One call per chunk (kvbench
before): D's test 1 + 1 + 1 = 3 > 4 and E's 3 > 3 both fail, so D, E get pages 5 and 6.
"""

from __future__ import annotations

import io
import json

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine, open_trace
from mini_engine.memory.audit.record import Auditor
from mini_engine.memory.config import MemoryConfig
from mini_engine.memory.manager import KVManager
from mini_engine.request import Request


def staged_manager() -> tuple[KVManager, list]:
    m = KVManager(MemoryConfig(4, 8, 4, 64, policy="unaligned", free_policy="segment"), Auditor("record"))
    assert m.stage_frees()
    a, b = m.admit("A"), m.admit("B")
    assert m.extend(a, 8) and m.extend(b, 8)
    m.commit(a, 8)
    m.commit(b, 8)
    m.release(b)
    m.release(a)
    return m, [m.admit("D"), m.admit("E")]


def slots(m: KVManager, s) -> list[int]:
    return m.slots(s, 0, s.allocated).tolist()


def test_one_call_for_the_batch_merges_by_the_batch_total():
    m, (d, e) = staged_manager()
    assert m.extend_batch([d, e], [4, 4])
    assert slots(m, d) == [4, 5, 6, 7] and slots(m, e) == [8, 9, 10, 11]


def test_one_call_per_chunk_would_not_merge():
    m, (d, e) = staged_manager()
    assert m.extend(d, 4) and m.extend(e, 4)
    assert slots(m, d) == [20, 21, 22, 23] and slots(m, e) == [24, 25, 26, 27]


def test_extend_fits_allocates_nothing():
    m, (d, e) = staged_manager()
    free = m.num_free_pages
    assert m.extend_fits([d, e], [4, 4]) and not m.extend_fits([d, e], [16, 20])
    assert m.num_free_pages == free and d.allocated == e.allocated == 0


def test_a_prefill_step_is_one_allocator_call_per_pool():
    cfg = EngineConfig(page_size=4, pool_tokens=256, window=8, layer_pattern="1:1", chunked_prefill=40)
    buf = io.StringIO()
    with open_trace(cfg, buf) as trace:
        eng = Engine(cfg, trace=trace)
        # Prompts sharing no prefix: the tree's inserts free no duplicate.
        eng.submit([Request(i, list(range(100 * i + 1, 100 * i + 14 + i)), 3) for i in range(4)])
        # The first prefill step: 13 and 14 tokens cost 16 each (SGLang's PrefillAdder charges
        # whole pages), so the third (15 tokens) is cut at floor_ps(40 - 32) = 8.
        eng.tick()
        # The allocations (the tree's records name no pool; the SWA window's frees at the
        # checkpoint after the prefill are frees).
        recs = [r for r in map(json.loads, buf.getvalue().splitlines()[1:]) if r["op"].startswith("alloc")]
    assert [(r["op"], r["pool"]) for r in recs] == [("alloc_extend", "full"), ("alloc_extend", "swa")]
    assert recs[0]["seq_lens"] == [13, 14, 8] and recs[0]["prefix_lens"] == [0, 0, 0]
