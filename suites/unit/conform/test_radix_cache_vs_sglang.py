"""kvbench's radix tree (mini_engine/memory/radix_cache.py) against SGLang's own ``RadixCache``
(0.5.18's full-attention tree, and 0.5.23's too where it is installed) and against the tree
0.5.23 builds for full attention, ``UnifiedRadixCache`` with the FULL component only.

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

UnifiedRadixCache frees the duplicates an insert finds itself, one free per node it
walked (prefix.py frees them so under 0.5.23's rules, from the tree's ``overlap``);
RadixCache leaves them to its caller, who frees the range in one call (0.5.18). Each
machine frees them its tree's way and the free lists must agree page for page, in order.
"""

from __future__ import annotations

import os
from array import array
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from harness import sglang_swa_radix
from harness.sglang_radix import matched_len, radix_cache, radix_namespace
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


@pytest.fixture(scope="module")
def sgunified(sgtree):
    if sgtree.sg.version == "0.5.18":
        pytest.skip("0.5.18 builds RadixCache for full attention (its registry), not UnifiedRadixCache")
    try:
        u = sglang_swa_radix.load()  # SGLang's serving stack, imported only here (heavy, optional)
    except Exception as err:  # an ImportError, or a dependency failing at import time
        if os.environ.get("KVBENCH_REQUIRE_SGLANG") == "1":
            pytest.fail(f"KVBENCH_REQUIRE_SGLANG=1 but SGLang's UnifiedRadixCache does not load: {err}")
        pytest.skip(f"SGLang's UnifiedRadixCache does not load on this machine: {err}")
    return SimpleNamespace(torch=sgtree.torch, ns=sgtree.ns, sg=sgtree.sg, u=u)


class _Unified:
    """UnifiedRadixCache(FULL) called as the RadixCache calls below call it."""

    def __init__(self, u, ps: int, allocator):
        self.u, self.tree = u, u.build_full(ps, allocator)
        self.root_node = self.tree.tree_core.root_node

    def insert(self, params):
        return self.tree.insert(self.u.base.InsertParams(key=params.key, value=params.value))

    def match_prefix(self, params):
        return self.tree.match_prefix(self.u.base.MatchPrefixParams(key=params.key))

    def inc_lock_ref(self, node):
        before = self.tree.evictable_size()
        receipt = self.tree.inc_lock_ref(node).to_dec_params()
        return SimpleNamespace(delta=self.tree.evictable_size() - before, receipt=receipt)

    def dec_lock_ref(self, node, receipt):
        before = self.tree.evictable_size()
        self.tree.dec_lock_ref(node, receipt)
        return SimpleNamespace(delta=self.tree.evictable_size() - before)

    def evict(self, params):
        return self.tree.evict(self.u.base.EvictParams(num_tokens=params.num_tokens))

    def evictable_size(self):
        return self.tree.evictable_size()

    def protected_size(self):
        return self.tree.protected_size()

    def path(self, node_id) -> list[int]:
        return self.tree.path_device_indices(node_id).tolist()


class Pair:
    """The two trees and their allocators, called alike."""

    def __init__(self, sgt, ps: int, unified: bool = False):
        self.sgt, self.ps, self.ns, self.unified = sgt, ps, sgt.ns, unified
        self.our_alloc = PagedAllocator(NUM_PAGES, ps)
        self.our = RadixCache(ps, free=lambda slots: self.our_alloc.free_pages(slots[::ps] // ps))
        self.sg_alloc = _sglang_allocator(sgt, ps)
        self.sg = _Unified(sgt.u, ps, self.sg_alloc) if unified else radix_cache(sgt.ns, ps, self.sg_alloc)

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

    unified = False  # set by the test: UnifiedRadixCache(FULL) in place of RadixCache

    @initialize(ps=st.sampled_from([1, 2, 4, 16]), seqs=_sequences())
    def start(self, ps, seqs):
        self.pair = Pair(self.sgt, ps, self.unified)
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
        # The part already cached is a duplicate: UnifiedRadixCache frees it itself, node by
        # node (kvbench: one free per node of the insert's overlap); RadixCache's caller
        # (_insert_cache) in one call. The unaligned tail stays out of the tree.
        if p.unified:
            for s, e in p.our.overlap:
                p.our_alloc.free_segment(slots, s, e)
        else:
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
        if p.unified:
            theirs = p.sg.path(res.last_device_node)
        else:
            theirs = [int(x) for v in _path_values(p.sg, res.last_device_node) for x in v.tolist()]
        assert matched_len(res) == len(slots) and slots.tolist() == theirs
        if lock:
            got = p.sg.inc_lock_ref(res.last_device_node)
            assert p.our.inc_lock_ref(node) == got.delta
            receipt = (got.receipt,) if p.unified else ()
            self.locks.append((node, res.last_device_node, receipt))

    @precondition(lambda self: self.locks)
    @rule(i=st.integers(0, 10**6))
    def unlock(self, i):
        ours, theirs, receipt = self.locks.pop(i % len(self.locks))
        assert self.pair.our.dec_lock_ref(ours) == self.pair.sg.dec_lock_ref(theirs, *receipt).delta

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


def _run(sgt, unified: bool):
    TreeMachine.sgt, TreeMachine.unified = sgt, unified
    run = TreeMachine.TestCase
    run.settings = settings(max_examples=60, stateful_step_count=30, deadline=None,
                            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    run().runTest()


def test_tree_equals_sglangs(sgtree):
    _run(sgtree, unified=False)


def test_tree_equals_sglangs_unified_full_tree(sgunified):
    """0.5.23's full-attention tree: the same answers, and its per-node duplicate frees."""
    _run(sgunified, unified=True)
