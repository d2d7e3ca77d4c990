"""kvbench's PagedAllocator and SGLang 0.5.23's own allocator, call by call.

Each test issues the same calls to both and compares every output, refusal and the
whole free list (order included) after every call. SGLang builds
PagedTokenToKVPoolAllocator for ps > 1 and TokenToKVPoolAllocator for ps == 1.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mini_engine.memory.pool.allocator import PagedAllocator


class Pair:
    """The two allocators over the same pool, driven together."""

    def __init__(self, sg, num_pages: int, ps: int, need_sort: bool = False):
        self.sg, self.ps, self.torch = sg, ps, sg.torch
        self.ours = PagedAllocator(num_pages, ps, need_sort=need_sort)
        if ps == 1:
            self.theirs = sg.token.TokenToKVPoolAllocator(num_pages, self.torch.int64, "cpu", None, need_sort)
        else:
            self.theirs = sg.paged.PagedTokenToKVPoolAllocator(num_pages * ps, ps, self.torch.int64, "cpu",
                                                              None, need_sort)

    def extend(self, prefix, seq, last, decode=False):
        t = self.torch
        got = self.ours.allocate(prefix, seq, last, decode=decode)
        ours = None if got is None else [s.tolist() for s in got.split()]
        p, s, l = (t.tensor(x, dtype=t.int64) for x in (prefix, seq, last))
        lens = (s - p).tolist()
        if self.ps == 1:
            out = self.theirs.alloc(sum(lens))
        elif decode:
            out = self.theirs.alloc_decode(s, s.clone(), l)
        else:
            out = self.theirs.alloc_extend(p, p.clone(), s, s.clone(), l, sum(lens))
        theirs = None if out is None else [x.tolist() for x in t.split(out, lens)]
        assert ours == theirs
        self.same()
        return ours

    def free(self, slots):
        self.ours.free(np.asarray(slots, dtype=np.int64))
        self.theirs.free(self.torch.tensor(slots, dtype=self.torch.int64))
        self.same()

    def free_pages(self, pages):
        self.ours.free_pages(np.asarray(pages, dtype=np.int64))
        self.theirs.free_page_ids(self.torch.tensor(pages, dtype=self.torch.int64))
        self.same()

    def group(self, begin: bool):
        if begin:
            self.ours.free_group_begin()
            self.theirs.free_group_begin()
        else:
            self.ours.free_group_end()
            self.theirs.free_group_end()
        self.same()

    def same(self):
        assert self.ours.free_page_ids().tolist() == self.theirs.get_all_free_pages().tolist()
        assert self.ours.available_size() == self.theirs.available_size()


def test_lifo_prepend_worked_numbers(sg):
    p = Pair(sg, 6, 2)
    assert p.extend([0], [6], [-1]) == [[2, 3, 4, 5, 6, 7]]  # pages 1, 2, 3
    p.free_pages([2, 1])  # in front, as given: 2, 1, 4, 5, 6
    assert p.extend([0], [8], [-1]) == [[4, 5, 2, 3, 8, 9, 10, 11]]
    p.free([9, 8, 5, 4])  # dedup free: unique pages 2, 4, sorted, in front
    assert p.ours.free_page_ids().tolist() == [2, 4, 6]


def test_page_size_1_appends_worked_numbers(sg):
    p = Pair(sg, 5, 1)
    assert p.extend([0], [3], [-1]) == [[1, 2, 3]]
    p.free([3, 1])  # at the back, as given
    assert p.extend([0, 0], [2, 1], [-1, -1]) == [[4, 5], [3]]
    p.free_pages([5, 4])
    assert p.ours.free_page_ids().tolist() == [1, 5, 4]


def test_need_sort_merge_bounds_worked_numbers(sg):
    p = Pair(sg, 10, 2, need_sort=True)
    p.extend([0], [6], [-1])  # pages 1, 2, 3
    p.free_pages([2, 1])  # staged
    assert p.extend([0], [4], [-1]) == [[8, 9, 10, 11]]  # 4 // 2 + 2 <= 7: no merge
    assert p.extend([0], [8], [-1]) == [[2, 3, 4, 5, 12, 13, 14, 15]]  # 8 // 2 + 2 > 5: merged
    q = Pair(sg, 6, 4, need_sort=True)
    q.extend([0, 0, 0], [4, 4, 4], [-1, -1, -1])
    q.free_pages([2])
    assert q.extend([4, 4, 4], [5, 5, 5], [7, 11, 15], decode=True) == [[16], [20], [24]]  # 3 > 3: no merge


@pytest.mark.parametrize("ps", [1, 4])
def test_free_group_worked_numbers(sg, ps):
    p = Pair(sg, 6, ps)
    p.extend([0, 0], [2 * ps, 2 * ps], [-1, -1])  # pages 1, 2 | 3, 4
    p.group(begin=True)
    p.free_pages([1])
    p.free([3 * ps, 2 * ps])  # pages 3, 2
    p.free_pages([4])
    assert p.ours.free_page_ids().tolist() == [5, 6]  # held until the end, in both
    p.group(begin=False)
    # ps > 1: the unique of the slot frees, then the page ids in call order, each in front.
    # ps 1: every free in call order, at the back.
    assert p.ours.free_page_ids().tolist() == ([1, 4, 2, 3, 5, 6] if ps > 1 else [5, 6, 1, 3, 2, 4])


def test_refused_calls_match(sg):
    p = Pair(sg, 4, 4, need_sort=True)
    p.extend([0], [16], [-1])
    p.free_pages([3, 1])
    assert p.extend([0], [12], [-1]) is None  # refused after the merge, in both
    assert p.ours.free_page_ids().tolist() == [1, 3]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ps=st.sampled_from([1, 2, 4, 16]), need_sort=st.booleans(), pages=st.integers(4, 24), data=st.data())
def test_random_call_sequences_match(sg, ps, need_sort, pages, data):
    """Any sequence of extends, decodes and frees: the same slots and the same free list."""
    p = Pair(sg, pages, ps, need_sort=need_sort)
    rows: list[list[int]] = []
    grouped = False
    for _ in range(data.draw(st.integers(5, 60), label="calls")):
        op = data.draw(st.sampled_from(["extend", "decode", "free", "free_pages", "group"]))
        if op == "group":  # SGLang holds a batch's frees in a group; allocations may come between
            grouped = not grouped
            p.group(begin=grouped)
        elif op == "extend":  # a batch of continuing and new requests
            pick = data.draw(st.lists(st.integers(0, max(len(rows) - 1, 0)), max_size=min(2, len(rows)),
                                      unique=True))
            batch = [rows[i] for i in pick] + [[] for _ in range(data.draw(st.integers(1, 2)))]
            prefix = [len(b) for b in batch]
            seq = [n + data.draw(st.integers(0, 3 * ps + 2)) for n in prefix]
            out = p.extend(prefix, seq, [b[-1] if b else -1 for b in batch])
            if out is not None:
                for b, o in zip(batch, out):
                    b.extend(o)
                rows.extend(batch[len(pick):])
        elif op == "decode" and any(rows):  # one slot for each of a few requests
            live = [i for i, r in enumerate(rows) if r]
            pick = data.draw(st.lists(st.sampled_from(live), min_size=1, max_size=3, unique=True))
            batch = [rows[i] for i in pick]
            seq = [len(b) + 1 for b in batch]
            out = p.extend([n - 1 for n in seq], seq, [b[-1] for b in batch], decode=ps > 1)
            if out is not None:
                for b, o in zip(batch, out):
                    b.extend(o)
        elif op.startswith("free") and any(rows):  # release a request: dedup free, or its pages in row order
            row = rows.pop(data.draw(st.sampled_from([i for i, r in enumerate(rows) if r])))
            if op == "free":
                p.free(row)
            else:
                p.free_pages([s // ps for s in row[::ps]])
    if grouped:
        p.group(begin=False)
