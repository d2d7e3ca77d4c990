"""PagedAllocator: three-part fill, all-or-nothing, frees, determinism."""

from __future__ import annotations

import numpy as np
import pytest

from mini_engine.errors import ConfigError, InvariantViolation
from mini_engine.memory.allocator import PagedAllocator
from mini_engine.memory.invariants import Auditor


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
        y = a.alloc_extend([0], [8], [-1])[0]  # 4 pages > 3 fresh: the released ones merge in
        return x.tolist(), y.tolist()

    assert run() == run()
    x, y = run()
    assert x == [2, 3, 4, 5, 6, 7]
    assert y == [2, 3, 4, 5, 8, 9, 10, 11]  # pages 1, 2, 4, 5: the merge sorts


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

