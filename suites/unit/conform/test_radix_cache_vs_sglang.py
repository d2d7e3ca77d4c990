"""kvbench's radix tree (mini_engine/memory/tree/radix_cache.py) against SGLang's own ``RadixCache``
(0.5.18's full-attention tree, and 0.5.23's too where it is installed) and against the tree
0.5.23 builds for full attention, ``UnifiedRadixCache`` with the FULL component only.

radix_cache.py and base_prefix_cache.py import the GPU stack at load time, so their
classes (``RadixKey``, ``TreeNode``, ``RadixCache``, the params and result dataclasses,
the LRU strategy) are compiled from the installed source (harness/conform/sglang_radix.py). SGLang's tree runs on SGLang's
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
SGLang's trees are called through the adapters ``kvbench conform`` replays traces with
(harness/conform/tree.py: FullRadix, FullUnified), so those are tested here too.
"""

from __future__ import annotations


import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from harness.conform.tree import FullRadix, FullUnified
from mini_engine.memory.pool.allocator import PagedAllocator
from mini_engine.memory.tree.radix_cache import RadixCache

NUM_PAGES = 40


def _sglang_allocator(sgt, ps: int):
    torch = sgt.torch
    if ps == 1:
        return sgt.token.TokenToKVPoolAllocator(NUM_PAGES, torch.int64, "cpu", None, False)
    return sgt.paged.PagedTokenToKVPoolAllocator(NUM_PAGES * ps, ps, torch.int64, "cpu", None, False)


@pytest.fixture(scope="module")
def sgunified(sg, request):
    if sg.version == "0.5.18":
        pytest.skip("0.5.18 builds RadixCache for full attention (its registry), not UnifiedRadixCache")
    request.getfixturevalue("sg_serving")  # SGLang's serving stack, or a skip (a failure when required)
    return sg


class Pair:
    """The two trees and their allocators, called alike."""

    def __init__(self, sgt, ps: int, unified: bool = False):
        self.sgt, self.ps, self.unified = sgt, ps, unified
        self.our_alloc = PagedAllocator(NUM_PAGES, ps)
        self.our = RadixCache(ps, free=lambda slots: self.our_alloc.free_pages(slots[::ps] // ps))
        self.sg_alloc = _sglang_allocator(sgt, ps)
        # SGLang's tree through kvbench conform's own adapter (harness/conform/tree.py), freeing into its allocator.
        self.sg = (FullUnified if unified else FullRadix)(sgt, ps, self.sg_alloc, bigram=False)

    def _sglang_short(self, n: int) -> bool:
        """SGLang's own answer when the pool cannot hold n tokens, taken without its kernel.

        0.5.18's alloc_extend launches alloc_extend_kernel before its size check: on a GPU
        the kernel reads past free_pages and its output is then dropped (None); on the CPU's
        Triton interpreter that read past the tensor can segfault the process (seen in CI).
        So its steps up to the check run here as it runs them (the merge of released pages
        when the pool looks short, then the check), and the kernel is called only when the
        pages are there. 0.5.23 checks first where it cannot prove the depth: it is called as is."""
        if self.sgt.version != "0.5.18":
            return False
        alloc, need = self.sg_alloc, -(-n // self.ps)
        if alloc.need_sort and n // self.ps + 1 + 1 > len(alloc.free_pages):  # extend_num_tokens // ps + bs + 1
            alloc.merge_and_sort_free()
        return need > len(alloc.free_pages)

    def alloc(self, n: int):
        torch = self.sgt.torch
        ours = self.our_alloc.alloc_extend([0], [n], [-1])
        if self.ps == 1:
            theirs = self.sg_alloc.alloc(n)
        else:
            z = torch.zeros(1, dtype=torch.int64)
            seq = torch.tensor([n], dtype=torch.int64)
            theirs = None if self._sglang_short(n) else self.sg_alloc.alloc_extend(
                z, z.clone(), seq, seq.clone(), torch.tensor([-1]), n)
        assert (ours is None) == (theirs is None)
        if ours is None:
            return None
        assert ours[0].tolist() == theirs.tolist()
        return ours[0]

    def free(self, slots: np.ndarray):
        """Whole pages of a request's row segment starting on a page boundary."""
        if len(slots):
            self.our_alloc.free_segment(slots, 0, len(slots))
            self.sg_alloc.free_segment(self.sgt.torch.tensor(slots, dtype=self.sgt.torch.int64), start_pos=0)


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
        _, theirs = p.sg.insert(tokens[:aligned], slots[:aligned], 0)
        assert ours == theirs
        # The part already cached is a duplicate: UnifiedRadixCache frees it itself, node by
        # node (kvbench: one free per node of the insert's overlap); RadixCache's caller
        # (_insert_cache) in one call. The unaligned tail stays out of the tree.
        if p.unified:
            for s, e in p.our.overlap_past(0):  # the checkpoint's rule (prefix.py), nothing locked before
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
        sg_node, matched = p.sg.match(tokens)
        assert matched == len(slots) and slots.tolist() == p.sg.path(sg_node)
        if lock:
            assert p.our.inc_lock_ref(node) == p.sg.lock(sg_node)
            self.locks.append((node, sg_node))

    @precondition(lambda self: self.locks)
    @rule(i=st.integers(0, 10**6))
    def unlock(self, i):
        ours, theirs = self.locks.pop(i % len(self.locks))
        assert self.pair.our.dec_lock_ref(ours) == self.pair.sg.unlock(theirs)

    @rule(n=st.integers(0, 80))
    def evict(self, n):
        p = self.pair
        assert p.our.evict(n) == p.sg.evict(n)

    @invariant()
    def sizes_agree(self):
        if not hasattr(self, "pair"):
            return
        p = self.pair
        assert p.our.evictable_size == p.sg.tree.evictable_size()
        assert p.our.protected_size == p.sg.tree.protected_size()
        assert p.our_alloc.available_size() == int(p.sg_alloc.available_size())
        # Conservation: every page is free or in the tree (no request holds one between calls).
        assert p.our_alloc.num_free_pages + p.our.pages == NUM_PAGES


def _run(sgt, unified: bool):
    TreeMachine.sgt, TreeMachine.unified = sgt, unified
    run = TreeMachine.TestCase
    run.settings = settings(max_examples=60, stateful_step_count=30, deadline=None,
                            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    run().runTest()


def test_tree_equals_sglangs(sg):  # sg: the installed SGLang, or a skip (a failure when required)
    _run(sg, unified=False)


def test_tree_equals_sglangs_unified_full_tree(sgunified):
    """0.5.23's full-attention tree: the same answers, and its per-node duplicate frees."""
    _run(sgunified, unified=True)
