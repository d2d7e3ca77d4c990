"""kvbench's radix tree (mini_engine/memory/radix_cache.py) against SGLang 0.5.23's own ``RadixCache``.

radix_cache.py and base_prefix_cache.py import the GPU stack at load time, so their
classes (``RadixKey``, ``TreeNode``, ``RadixCache``, the params and result dataclasses,
the LRU strategy) are compiled from the installed source (harness/sglang_radix.py). SGLang's tree runs on SGLang's
own allocator (``PagedTokenToKVPoolAllocator``, ``TokenToKVPoolAllocator`` at ps 1), on a
CPU, with ``time.monotonic`` replaced by a counter: a strictly increasing clock, so LRU
order has no ties (kvbench's tree ticks a logical clock at the same points). A hypothesis
state machine drives both with the same inserts (a request's slots, its duplicates and
its unaligned tail freed as ``_insert_cache`` does), matches, locks, unlocks and
evictions, and compares after every call: matched lengths and slots, the length already
cached, lock deltas, tokens evicted, evictable and protected sizes, and both allocators'
free slots (so the pages each eviction returns, and the slots each allocation hands out).
"""

from __future__ import annotations

from array import array
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from harness.sglang_radix import radix_cache, radix_namespace
from mini_engine.memory.allocator import PagedAllocator
from mini_engine.memory.radix_cache import RadixCache

NUM_PAGES = 40


@pytest.fixture(scope="module")
def sgtree(sg):  # sg: the installed SGLang, or a skip (a failure under KVBENCH_REQUIRE_SGLANG=1)
    import torch

    return SimpleNamespace(torch=torch, ns=radix_namespace(torch), sg=sg)


def _sglang_allocator(sgt, ps: int):
    torch = sgt.torch
    if ps == 1:
        return sgt.sg.token.TokenToKVPoolAllocator(NUM_PAGES, torch.int64, "cpu", None, False)
    return sgt.sg.paged.PagedTokenToKVPoolAllocator(NUM_PAGES * ps, ps, torch.int64, "cpu", None, False)


def _sglang_tree(sgt, ps: int, allocator):
    return radix_cache(sgt.ns, ps, allocator)


class Pair:
    """The two trees and their allocators, called alike."""

    def __init__(self, sgt, ps: int):
        self.sgt, self.ps, self.ns = sgt, ps, sgt.ns
        self.our_alloc = PagedAllocator(NUM_PAGES, ps)
        self.our = RadixCache(ps, free=lambda slots: self.our_alloc.free_pages(slots[::ps] // ps))
        self.sg_alloc = _sglang_allocator(sgt, ps)
        self.sg = _sglang_tree(sgt, ps, self.sg_alloc)

    def key(self, tokens):
        return self.ns["RadixKey"](array("q", tokens))

    def alloc(self, n: int):
        torch = self.sgt.torch
        ours = self.our_alloc.alloc_extend([0], [n], [-1])
        if self.ps == 1:
            theirs = self.sg_alloc.alloc(n)
        else:
            z = torch.zeros(1, dtype=torch.int64)
            seq = torch.tensor([n], dtype=torch.int64)
            theirs = self.sg_alloc.alloc_extend(z, z.clone(), seq, seq.clone(), torch.tensor([-1]), n)
        assert (ours is None) == (theirs is None)
        if ours is None:
            return None
        assert ours[0].tolist() == theirs.tolist()
        return ours[0]

    def free(self, slots: np.ndarray):
        """Whole pages of a request's row segment starting on a page boundary."""
        if len(slots):
            self.our_alloc.free_segment(slots, 0, len(slots))
            self.sg_alloc.free_segment(self.sgt.torch.tensor(slots, dtype=torch_int64(self.sgt)), start_pos=0)


def torch_int64(sgt):
    return sgt.torch.int64


BASES = 4


@st.composite
def _sequences(draw):
    """A few token sequences sharing prefixes of assorted lengths (some off the page grid)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    root = rng.integers(1, 50, 120).tolist()
    seqs = [root]
    for _ in range(BASES - 1):
        cut = draw(st.integers(0, 100))
        seqs.append(root[:cut] + rng.integers(50, 100, 120 - cut).tolist())
    return seqs


class TreeMachine(RuleBasedStateMachine):
    sgt = None  # set by the test

    @initialize(ps=st.sampled_from([1, 2, 4, 16]), seqs=_sequences())
    def start(self, ps, seqs):
        self.pair = Pair(self.sgt, ps)
        self.seqs = seqs
        self.locks: list[tuple[object, object]] = []

    @rule(b=st.integers(0, BASES - 1), n=st.integers(1, 120))
    def insert(self, b, n):
        p, ps = self.pair, self.pair.ps
        tokens = self.seqs[b][:n]
        slots = p.alloc(n)
        if slots is None:
            return
        ours = p.our.insert(tokens, slots)
        torch = self.sgt.torch
        aligned = n // ps * ps
        theirs = p.sg.insert(self.sgt.ns["InsertParams"](key=p.key(tokens)[:aligned],
                                                          value=torch.tensor(slots[:aligned]))).prefix_len
        assert ours == theirs
        # _insert_cache: the part already cached is a duplicate; the unaligned tail stays out of the tree.
        p.free(slots[:ours])
        if aligned < n:
            p.our_alloc.free_segment(slots, aligned, n)
            p.sg_alloc.free_segment(torch.tensor(slots[aligned:n]), start_pos=aligned)

    @rule(b=st.integers(0, BASES - 1), n=st.integers(0, 120), lock=st.booleans())
    def match(self, b, n, lock):
        p = self.pair
        tokens = self.seqs[b][:n]
        slots, node = p.our.match_prefix(tokens)
        res = p.sg.match_prefix(self.sgt.ns["MatchPrefixParams"](key=p.key(tokens)))
        theirs = [int(x) for v in _path_values(p.sg, res.last_device_node) for x in v.tolist()]
        assert res.device_prefix_len == len(slots) and slots.tolist() == theirs
        if lock:
            assert p.our.inc_lock_ref(node) == p.sg.inc_lock_ref(res.last_device_node).delta
            self.locks.append((node, res.last_device_node))

    @precondition(lambda self: self.locks)
    @rule(i=st.integers(0, 10**6))
    def unlock(self, i):
        ours, theirs = self.locks.pop(i % len(self.locks))
        assert self.pair.our.dec_lock_ref(ours) == self.pair.sg.dec_lock_ref(theirs).delta

    @rule(n=st.integers(0, 80))
    def evict(self, n):
        p = self.pair
        assert p.our.evict(n) == p.sg.evict(self.sgt.ns["EvictParams"](num_tokens=n)).num_tokens_evicted

    @invariant()
    def sizes_agree(self):
        if not hasattr(self, "pair"):
            return
        p = self.pair
        assert p.our.evictable_size == p.sg.evictable_size()
        assert p.our.protected_size == p.sg.protected_size()
        assert p.our_alloc.available_size() == int(p.sg_alloc.available_size())
        # Conservation: every page is free or in the tree (no request holds one between calls).
        assert p.our_alloc.num_free_pages + p.our.pages == NUM_PAGES


def _path_values(tree, node):
    out = []
    while node is not tree.root_node:
        out.append(node.value)
        node = node.parent
    return out[::-1]


def test_tree_equals_sglangs(sgtree):
    TreeMachine.sgt = sgtree
    run = TreeMachine.TestCase
    run.settings = settings(max_examples=60, stateful_step_count=30, deadline=None,
                            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    run().runTest()
