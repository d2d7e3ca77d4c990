"""PagedAllocator: three-part fill, all-or-nothing, frees, determinism."""

from __future__ import annotations

import numpy as np
import pytest

from mini_engine.errors import ConfigError, InvariantViolation
from mini_engine.memory.audit.record import Auditor
from mini_engine.memory.pool.allocator import PagedAllocator


def test_three_part_fill():
    a = PagedAllocator(8, 4)
    first = a.alloc_extend([0], [6], [-1])[0]
    assert first.tolist() == [4, 5, 6, 7, 8, 9]  # page 1 whole, page 2 started; page 0 never used
    # Extend 6 -> 15: rest of page 2 (slots 10, 11), whole page 3, start of page 4.
    nxt = a.alloc_extend([6], [15], [int(first[-1])])[0]
    assert nxt.tolist() == [10, 11, 12, 13, 14, 15, 16, 17, 18]
    assert all(s % 4 == p % 4 for p, s in zip(range(6, 15), nxt))
    assert a.num_free_pages == 8 - 4


def test_batch_is_request_major_and_decode_continues_pages():
    a = PagedAllocator(16, 4)
    out = a.alloc_extend([0, 0, 0], [3, 4, 5], [-1, -1, -1])
    assert [o.tolist() for o in out] == [[4, 5, 6], [8, 9, 10, 11], [12, 13, 14, 15, 16]]
    dec = a.alloc_decode([4, 5, 6], [6, 11, 16])
    assert [d.tolist() for d in dec] == [[7], [20], [17]]


def test_all_or_nothing():
    a = PagedAllocator(4, 16)
    before = a.available_size()
    assert a.alloc_extend([0, 0], [40, 40], [-1, -1]) is None  # needs 6 pages of 4
    assert a.available_size() == before == 64
    assert a.alloc_extend([0], [64], [-1]) is not None
    assert a.available_size() == 0
    assert a.alloc_extend([0], [1], [-1]) is None
    assert a.alloc_extend([0], [10**15], [-1]) is None  # refused on the page count, nothing built


def test_deterministic_order_and_recycling():
    def run():
        a = PagedAllocator(6, 2)
        x = a.alloc_extend([0], [6], [-1])[0]
        a.free_pages(np.array([2, 1]))
        y = a.alloc_extend([0], [8], [-1])[0]
        return x.tolist(), y.tolist()

    assert run() == run()
    x, y = run()
    assert x == [2, 3, 4, 5, 6, 7]  # pages 1, 2, 3
    # SGLang's paged free puts the freed pages in front, in the order given (LIFO):
    # the list is 2, 1, 4, 5, 6 and the next 4 pages are 2, 1, 4, 5.
    assert y == [4, 5, 2, 3, 8, 9, 10, 11]


def test_lifo_prepend_and_sorted_dedup_free():
    a = PagedAllocator(8, 4)
    a.alloc_extend([0, 0], [8, 8], [-1, -1])  # pages 1, 2 | 3, 4
    a.free_pages([4, 3])
    a.free(np.array([5, 4, 9, 8]))  # slots of pages 1 and 2: a unique gives them sorted
    assert a.free_page_ids().tolist() == [1, 2, 4, 3, 5, 6, 7, 8]
    assert a.alloc_extend([0], [9], [-1])[0].tolist() == [4, 5, 6, 7, 8, 9, 10, 11, 16]


def test_page_size_1_frees_append_in_the_order_given():
    # SGLang's token allocator (ps 1): a free appends at the back, no unique.
    a = PagedAllocator(5, 1)
    assert a.alloc_extend([0], [3], [-1])[0].tolist() == [1, 2, 3]
    a.free(np.array([3, 1]))
    assert a.free_page_ids().tolist() == [4, 5, 3, 1]
    assert a.alloc_extend([0, 0], [2, 2], [-1, -1]) is not None
    assert a.free_page_ids().tolist() == []
    a.free_pages([2, 5])
    assert a.alloc_extend([0], [2], [-1])[0].tolist() == [2, 5]


def test_need_sort_stages_frees_and_merges_on_sglangs_bound():
    a = PagedAllocator(10, 2, need_sort=True)
    a.alloc_extend([0], [6], [-1])  # pages 1, 2, 3; free 4..10 (7 pages)
    a.free_pages([2, 1])  # staged, not handed out yet
    assert a.num_free_pages == 9 and a.free_page_ids().tolist() == [4, 5, 6, 7, 8, 9, 10, 2, 1]
    # 4 tokens, batch 1: 4 // 2 + 1 + 1 = 4 <= 7, no merge.
    assert a.alloc_extend([0], [4], [-1])[0].tolist() == [8, 9, 10, 11]  # pages 4, 5
    # 8 tokens: needs 4 pages of the 5 in the list, but 8 // 2 + 2 = 6 > 5 merges first.
    assert a.alloc_extend([0], [8], [-1])[0].tolist() == [2, 3, 4, 5, 12, 13, 14, 15]  # pages 1, 2, 6, 7
    assert a.free_page_ids().tolist() == [8, 9, 10]


def test_need_sort_decode_and_extend_merge_on_their_own_bounds():
    def staged():
        a = PagedAllocator(6, 4, need_sort=True)
        a.alloc_extend([0, 0, 0], [4, 4, 4], [-1, -1, -1])  # pages 1, 2, 3; list 4, 5, 6
        a.free_pages([2])  # staged
        return a

    # Three requests each starting a page. alloc_decode merges when 3 > len(list) = 3:
    # no, so pages 4, 5, 6.
    dec = staged().alloc_decode([5, 5, 5], [7, 11, 15])
    assert [d.tolist() for d in dec] == [[16], [20], [24]]
    # The same call as an extend: 3 // 4 + 3 + 1 = 4 > 3 merges first, so pages 2, 4, 5.
    ext = staged().alloc_extend([4, 4, 4], [5, 5, 5], [7, 11, 15])
    assert [e.tolist() for e in ext] == [[8], [16], [20]]


def test_need_sort_refused_call_still_merges():
    a = PagedAllocator(4, 4, need_sort=True)
    a.alloc_extend([0], [16], [-1])
    a.free_pages([3, 1])
    assert a.free_page_ids().tolist() == [3, 1]
    assert a.alloc_extend([0], [12], [-1]) is None  # 3 pages > 2: refused, after the merge
    assert a.free_page_ids().tolist() == [1, 3] and a.num_free_pages == 2


def test_trace_marks_decode_and_need_sort(tmp_path):
    import io
    import json

    from mini_engine.memory.trace.writer import TraceWriter

    buf = io.StringIO()
    a = PagedAllocator(4, 4, trace=TraceWriter(buf, {"page_size": 4, "num_pages": 4}), need_sort=True)
    a.alloc_extend([0], [4], [-1])
    a.alloc_decode([5], [7])
    a.free_pages([1])
    recs = [json.loads(line) for line in buf.getvalue().splitlines()[1:]]
    assert [r.get("decode") for r in recs] == [None, True, None]
    assert recs[2]["need_sort"] is True and "need_sort" not in recs[0]


def test_dedup_free_counts_a_sync_and_frees_unique_pages():
    a = PagedAllocator(8, 4)
    s = a.alloc_extend([0], [10], [-1])[0]
    freed = a.free(s)
    assert sorted(freed.tolist()) == [1, 2, 3]
    assert a.syncs == 1 and a.num_free_pages == 8


def test_free_segment_one_representative_per_page():
    a = PagedAllocator(8, 4)
    row = a.alloc_extend([0], [12], [-1])[0]
    freed = a.free_segment(row, 4, 12)
    assert freed.tolist() == [2, 3] and a.syncs == 0
    with pytest.raises(InvariantViolation, match="K5"):
        a.free_segment(row, 2, 4)


def test_double_free_and_dummy_page_are_k5():
    a = PagedAllocator(8, 4)
    a.alloc_extend([0], [8], [-1])
    a.free_pages([1])
    with pytest.raises(InvariantViolation, match="K5"):
        a.free_pages([1])
    with pytest.raises(InvariantViolation, match="K5"):
        a.free_pages([0])
    aud = Auditor("record")
    b = PagedAllocator(8, 4, auditor=aud)
    b.alloc_extend([0], [8], [-1])
    b.free_pages([2, 2])
    assert aud.counts == {"K5": 1} and b.num_free_pages == 6 + 1  # page 2 back once


def test_bad_last_loc_is_refused():
    a = PagedAllocator(8, 4)
    a.alloc_extend([0], [2], [-1])
    free, is_free = a.num_free_pages, a.is_free(np.arange(9)).copy()
    with pytest.raises(ValueError, match="last_loc"):
        a.alloc_extend([2], [9], [7])  # position 1 cannot live in slot 7 (7 % 4 != 1)
    # Refused before any page was taken: the pool is as it was.
    assert a.num_free_pages == free and (a.is_free(np.arange(9)) == is_free).all()


@pytest.mark.parametrize("kwargs, name", [
    ({"num_pages": 0, "page_size": 4}, "num_pages"),
    ({"num_pages": 4, "page_size": 0}, "page_size"),
    ({"num_pages": 4, "page_size": 4, "pool": "kv"}, "pool"),
])
def test_bad_sizes(kwargs, name):
    with pytest.raises(ConfigError, match=f"^{name} must be"):
        PagedAllocator(**kwargs)



def _grouped(pool):
    a = PagedAllocator(6, 4, pool)
    a.alloc_extend([0, 0], [8, 8], [-1, -1])  # pages 1, 2 | 3, 4; list 5, 6
    a.free_group_begin()
    assert a.free_pages([1]).tolist() == [1]
    a.free(np.array([12, 8, 9]))  # pages 3, 2
    a.free_pages([4])
    assert a.free_page_ids().tolist() == [5, 6] and a.available_size() == 8  # held until the end
    a.free_group_end()
    return a


def test_free_group_full_pool_order():
    # SGLang's paged group end: one unique of the slot frees in front, then the page ids
    # (in call order) in front of that.
    a = _grouped("full")
    assert a.free_page_ids().tolist() == [1, 4, 2, 3, 5, 6] and a.syncs == 1


def test_free_group_swa_pool_order():
    # SGLang's SWA allocator ends its page-id group first, then its slot group.
    a = _grouped("swa")
    assert a.free_page_ids().tolist() == [2, 3, 1, 4, 5, 6] and a.syncs == 1


def test_free_group_page_size_1_keeps_call_order_and_checks_at_the_call():
    a = PagedAllocator(6, 1)
    a.alloc_extend([0], [4], [-1])
    a.free_group_begin()
    a.free_pages([3])
    a.free(np.array([1, 4]))
    with pytest.raises(InvariantViolation, match="K5"):
        a.free_pages([3])  # already freed in this group
    a.free_group_end()
    assert a.free_page_ids().tolist() == [5, 6, 3, 1, 4]
    with pytest.raises(RuntimeError, match="without free_group_begin"):
        a.free_group_end()


def test_free_group_trace_records_the_end_of_group_calls():
    import io
    import json

    from mini_engine.memory.trace.writer import TraceWriter

    buf = io.StringIO()
    a = PagedAllocator(6, 4, trace=TraceWriter(buf, {"page_size": 4, "num_pages": 6}))
    a.alloc_extend([0, 0], [8, 8], [-1, -1])
    a.free_group_begin()
    a.free_pages([1])
    a.free(np.array([12, 8]))
    a.free_pages([4])
    a.free_group_end()
    recs = [json.loads(line) for line in buf.getvalue().splitlines()[2:]]
    assert [(r["op"], r.get("indices", r.get("page_ids")), r["available"]) for r in recs] == [
        ("free", [12, 8], 16), ("free_pages", [1, 4], 24)]
