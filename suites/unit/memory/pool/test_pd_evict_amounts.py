"""What the decode side's tree evicts before a PD prealloc (memory/tables.make_room_pd), on
worked numbers per release (SGLang's disaggregation/decode.py):

* 0.5.23 on the SWA tail path: ``reclaim_for_prealloc`` first asks the tree for the SWA
  tokens the tail's pages lack (``EvictParams(swa_num_tokens=...)``), then ``_pre_alloc``
  for the full tokens its new pages lack (``EvictParams(num_tokens=...)``): two calls,
  each one pool's shortfall;
* 0.5.18: one call, ``EvictParams(num_tokens=required - available_size())``, where its SWA
  allocator's ``available_size`` is the smaller of the two pools; no SWA reclaim.

Setup: ps 16, window 32, 40 full pages, 7 SWA pages, the decode radix cache on. Request A
(200 tokens) is preallocated and released into the tree: 12 full pages and its last two
SWA pages stay there, evictable (free: 28 full, 5 SWA). A holder H of 112 tokens takes
7 full pages and its SWA tail. Then B (400 tokens: 25 full pages) arrives.
"""

from __future__ import annotations

import pytest

from mini_engine.memory.audit.record import Auditor
from mini_engine.memory.config import MemoryConfig
from mini_engine.memory.manager import KVManager
from mini_engine.memory.rules import MemoryRules


def evictions(rules: MemoryRules):
    m = KVManager(MemoryConfig(16, 40, 8, 1024, swa_num_pages=7, window=32, rules=rules), Auditor("raise"))
    calls = []
    evict = m.prefix.tree.evict

    def recorded(full, swa):
        calls.append((full, swa, m.num_free_pages, m.swa.allocator.num_free_pages))
        return evict(full, swa)

    m.prefix.tree.evict = recorded
    a = m.admit("A")
    assert m.pd_prealloc(a, 200)
    m.release(a, list(range(1, 201)), 200)
    assert (m.num_free_pages, m.swa.allocator.num_free_pages) == (28, 5)
    assert m.pd_prealloc(m.admit("H"), 112)
    assert m.pd_prealloc(m.admit("B"), 400)
    return calls


def a_in_the_tree_h_held(ps: int, pages: int, swa_pages: int, rules: MemoryRules):
    """A (200 tokens) preallocated and released into the tree, then H (112) preallocated;
    the tree's evict calls from then on, as (full, swa) tokens asked."""
    m = KVManager(MemoryConfig(ps, pages, 8, 1024, swa_num_pages=swa_pages, window=32, rules=rules),
                  Auditor("raise"))
    calls = []
    evict = m.prefix.tree.evict
    m.prefix.tree.evict = lambda full, swa: (calls.append((full, swa)), evict(full, swa))[1]
    a = m.admit("A")
    assert m.pd_prealloc(a, 200)
    m.release(a, list(range(1, 201)), 200)
    assert m.pd_prealloc(m.admit("H"), 112)
    return m, calls

def test_0523_reclaims_the_tail_swa_then_the_full_shortfall():
    # H's tail (window start floor_16(111 - 32) = 64) is 3 SWA pages: 2 left. B's tail
    # (floor_16(399 - 32) = 352) is 48 tokens, 3 pages: 48 - 2 x 16 = 16 SWA tokens are
    # asked for first. That eviction takes A's last node whole ([160, 192): A's insert split
    # its key at the SWA cursor), 2 SWA and 2 full pages (21 -> 23 full free), so the full
    # call asks 25 x 16 - 23 x 16 = 32.
    calls = evictions(MemoryRules(pd_radix=True, pd_radix_tail=True))
    assert calls == [(0, 16, 21, 2), (32, 0, 23, 4)]



def test_0523_a_reclaim_that_falls_short_refuses_before_the_full_eviction():
    # As above, but a second holder H2 (112 tokens) comes before B. H2's 3 tail pages find
    # 2 free: its reclaim takes A's last node (2 SWA pages, 2 full), leaving 1 SWA page free,
    # 16 full, nothing evictable in SWA. B's tail needs 3 SWA pages: the reclaim finds nothing
    # to evict and the pool is still short, so pop_preallocated aborts B before _pre_alloc:
    # B's 25 full pages against 16 free ask the tree for nothing.
    m, calls = a_in_the_tree_h_held(16, 40, 7, MemoryRules(pd_radix=True, pd_radix_tail=True))
    assert m.pd_prealloc(m.admit("H2"), 112)
    assert calls == [(0, 16)] and (m.num_free_pages, m.swa.allocator.num_free_pages) == (16, 1)
    calls.clear()
    b = m.admit("B")
    assert not m.pd_prealloc(b, 400)
    assert m.reclaim_short and m.short_pool == "swa"
    assert calls == [] and m.num_free_pages == 16  # no full eviction for an aborted request
    m.release(b)
    assert m.pd_prealloc(m.admit("C"), 16) and not m.reclaim_short  # the flag is the last prealloc's


def test_0518_evicts_full_tokens_short_of_the_smaller_pool():
    # H: 112 tokens against min(28, 5) x 16 = 80: 32 full tokens asked (the SWA pool is the
    # smaller one, but only the full pool is named). B: 400 against min(23, 5) x 16 = 80.
    calls = evictions(MemoryRules(pd_radix=True, pd_radix_tail=False))
    assert calls == [(32, 0, 28, 5), (320, 0, 23, 5)]


def test_full_attention_evicts_the_full_shortfall():
    # No SWA pool: _pre_alloc's eviction alone. A's 12 pages stay in the tree (28 free), H
    # takes 7 (21 free), B's 25 pages want 400 tokens: 400 - 21 x 16 = 64 asked.
    m = KVManager(MemoryConfig(16, 40, 8, 1024, rules=MemoryRules(pd_radix=True)), Auditor("raise"))
    calls = []
    evict = m.prefix.tree.evict
    m.prefix.tree.evict = lambda n: (calls.append((n, m.num_free_pages)), evict(n))[1]
    a = m.admit("A")
    assert m.pd_prealloc(a, 200)
    m.release(a, list(range(1, 201)), 200)
    assert m.pd_prealloc(m.admit("H"), 112)
    assert m.pd_prealloc(m.admit("B"), 400)
    assert calls == [(64, 21)]


@pytest.mark.parametrize("tail_rule", [True, False])
def test_at_ps_1_both_releases_evict_only_full_tokens(tail_rule):
    # ps 1 takes no SWA tail path: 0.5.23 evicts the full shortfall against the full pool,
    # 0.5.18 against the smaller one; with pools of 640 tokens each both are 400 - 328 = 72
    # (A's 200 tokens in the tree, H's 112 held), asked of the full pool alone.
    m, calls = a_in_the_tree_h_held(1, 640, 640, MemoryRules(pd_radix=True, pd_radix_tail=tail_rule))
    assert (m.num_free_pages, m.swa.allocator.num_free_pages) == (328, 328)
    assert m.pd_prealloc(m.admit("B"), 400)
    assert calls == [(72, 0)]


def test_without_pd_radix_the_prompts_tree_gives_back_both_pools():
    # No decode-side tree: the tree holds what kvbench's one engine put there (a decode node
    # would hold none of it). ps 1, 640 full and 400 SWA slots: A's 200 tokens stay in the
    # tree with their SWA slots (440 and 200 free); H holds 112 (328 and 88). B's 240 tokens
    # fit the full pool but not the SWA pool: 152 SWA tokens are asked of the tree. Before,
    # only the full shortfall (0) was asked: B never fit, and the run stalled (a case the
    # overlap state machine found in an engine mixing prompts and PD arrivals).
    m, calls = a_in_the_tree_h_held(1, 640, 400, MemoryRules(pd_radix=False))
    full, swa = m.num_free_pages, m.swa.allocator.num_free_pages
    assert m.pd_prealloc(m.admit("B"), 240)
    assert (full, swa) == (328, 88) and calls == [(0, 152)]
