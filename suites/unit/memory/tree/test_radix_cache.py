"""The radix prefix tree (mini_engine/memory/tree/radix_cache.py): worked examples.

The tree is checked call by call against SGLang's own RadixCache in
suites/unit/conform/test_radix_cache_vs_sglang.py; these are the numbers a reader can
follow by hand.
"""

from __future__ import annotations

import numpy as np
import pytest

from mini_engine.memory.pool.allocator import PagedAllocator
from mini_engine.memory.tree.radix_cache import RadixCache


def _tree(num_pages: int, ps: int):
    alloc = PagedAllocator(num_pages, ps)
    return alloc, RadixCache(ps, free=lambda slots: alloc.free_pages(slots[::ps] // ps))


def test_shared_prompt_is_kept_once():
    # 16 requests x (512 shared + 64 own tokens), 128 outputs, ps 16, 4096 pages (DESIGN.md's example).
    ps, n = 16, 16
    alloc, tree = _tree(4096, ps)
    shared = list(range(1, 513))
    prompts = [shared + list(range(10_000 * (i + 1), 10_000 * (i + 1) + 64)) for i in range(n)]
    rows = [alloc.alloc_extend([0], [576], [-1])[0] for _ in range(n)]
    assert alloc.num_free_pages == 4096 - 16 * 36  # 576 pages for the prefill batch
    nodes = []
    for prompt, row in zip(prompts, rows):  # the prefill result: insert, free duplicates, lock
        cached = tree.insert(prompt, row)
        alloc.free_segment(row, 0, cached)
        slots, node = tree.match_prefix(prompt)
        row[:576] = slots
        tree.inc_lock_ref(node)
        nodes.append(node)
    assert tree.pages == 32 + 16 * 4 == 96 and alloc.num_free_pages == 4096 - 96
    assert tree.protected_size == 96 * ps and tree.evictable_size == 0
    # 128 decode steps: each request's positions 576..703 take 8 more pages.
    rows = [np.concatenate([row, alloc.alloc_extend([576], [704], [row[575]])[0]]) for row in rows]
    assert 4096 - alloc.num_free_pages == 224
    for i, (prompt, row) in enumerate(zip(prompts, rows)):  # finish: 703 tokens have KV
        tokens = prompt + list(range(50_000 + 200 * i, 50_000 + 200 * i + 127))
        cached = tree.insert(tokens, row)
        assert cached == 576
        alloc.free_segment(row, 688, 704)  # the unaligned tail page stays out of the tree
        tree.dec_lock_ref(nodes[i])
    assert tree.pages == 32 + 16 * 11 == 208 and tree.evictable_pages == 208 and tree.protected_size == 0
    assert alloc.num_free_pages == 3888 and alloc.num_free_pages + tree.pages == 4096


def test_match_is_page_granular_and_splits():
    alloc, tree = _tree(16, 4)
    a = list(range(12))
    tree.insert(a, alloc.alloc_extend([0], [12], [-1])[0])
    slots, node = tree.match_prefix(a[:6] + [99, 99])  # 6 tokens agree: one whole page matches
    assert len(slots) == 4 and node.key.tolist() == a[:4] and len(node.children) == 1
    assert tree.evictable_size == 12 and tree.pages == 3


def test_lru_leaf_goes_first_and_locked_nodes_stay():
    alloc, tree = _tree(16, 2)
    a, b = [1, 2, 3, 4], [5, 6, 7, 8]
    tree.insert(a, alloc.alloc_extend([0], [4], [-1])[0])
    tree.insert(b, alloc.alloc_extend([0], [4], [-1])[0])
    tree.match_prefix(a)  # a is now the most recently used
    assert tree.evict(1) == 4 and len(tree.match_prefix(b)[0]) == 0 and len(tree.match_prefix(a)[0]) == 4
    _, node = tree.match_prefix(a)
    tree.inc_lock_ref(node)
    assert tree.evict(100) == 0 and tree.protected_size == 4 and tree.evicted_leaves == 1
    tree.dec_lock_ref(node)
    assert tree.evict(100) == 4 and tree.total_size() == 0 and alloc.num_free_pages == 16
    with pytest.raises(ValueError, match="unlocked"):
        tree.dec_lock_ref(node)


def test_an_evicted_parent_follows_its_last_child():
    alloc, tree = _tree(16, 2)
    tree.insert([1, 2, 3, 4], alloc.alloc_extend([0], [4], [-1])[0])
    row = alloc.alloc_extend([0], [6], [-1])[0]
    cached = tree.insert([1, 2, 3, 4, 5, 6], row)  # splits nothing: [1..4] then a child [5, 6]
    alloc.free_segment(row, 0, cached)
    assert cached == 4 and tree.pages == 3
    assert tree.evict(4) == 6 and tree.pages == 0  # the leaf [5, 6], then its parent
