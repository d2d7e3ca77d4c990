"""The SWA-aware tree's eviction (swa_radix.SWARadixCache), as plain functions over the tree.

FULL first, as the full tree: least recently used unlocked leaves (a leaf frees its FULL
and SWA slots, and childless unlocked ancestors follow). Then SWA, from the SWA LRU's
least recent unlocked node: a leaf is deleted whole; an internal node is tombstoned (its
SWA slots freed, FULL kept), which is how tombstones come to be inside the tree.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the tree calls in here; importing it at run time would be a cycle
    from mini_engine.memory.tree.swa_radix import SWANode, SWARadixCache


def evict(tree: SWARadixCache, full_tokens: int, swa_tokens: int = 0) -> tuple[int, int]:
    """FULL leaves (LRU) until full_tokens are freed, then SWA (its LRU: leaves deleted,
    internal nodes tombstoned) until swa_tokens are; returns (FULL, SWA) tokens freed."""
    freed = {"full": 0, "swa": 0}
    if freed["full"] < full_tokens:
        heap = [(n.last_access, n.id, n) for n in tree.leaves]
        heapq.heapify(heap)
        last = None
        while freed["full"] < full_tokens:
            if last is not None and last.parent in tree.leaves:
                p = last.parent
                heapq.heappush(heap, (p.last_access, p.id, p))
            last = None
            while heap:
                x = heapq.heappop(heap)[2]
                if x in tree.leaves:
                    last = x
                    break
            if last is None:
                break
            _delete_leaf(tree, last, freed)
    if freed["swa"] < swa_tokens:
        cursor = _lru_prev_unlocked(tree, len(tree.lru) - 1)
        while freed["swa"] < swa_tokens:
            if cursor is not None and cursor not in tree.lru:
                cursor = _lru_prev_unlocked(tree, len(tree.lru) - 1)
            if cursor is None:
                break
            x = cursor
            cursor = _lru_prev_unlocked(tree, tree.lru.index(x) - 1)
            if x in tree.leaves:
                _delete_leaf(tree, x, freed)
            else:
                _tombstone(tree, x, freed)
    return freed["full"], freed["swa"]


def _tombstone(tree: SWARadixCache, x: SWANode, freed: dict) -> None:
    if x.swa_lock:  # a FULL lock alone does not keep SWA slots outside the window
        tree.locked_evictions.append(x.id)
    tree.free_swa(x.full)
    tree.swa_evictable -= len(x.swa)
    freed["swa"] += len(x.swa)
    tree.tombstoned_tokens += len(x.swa)
    x.swa = None
    tree.lru_remove(x)
    tree.update_leaf(x)


def _delete_leaf(tree: SWARadixCache, x: SWANode, freed: dict) -> None:
    """A leaf goes whole (FULL and SWA); childless unlocked ancestors without FULL follow."""
    if x.swa_lock or x.full_lock:
        tree.locked_evictions.append(x.id)
    tree.free_full(x.full)
    tree.full_evictable -= len(x.key)
    freed["full"] += len(x.key)
    if x.swa is not None:
        tree.free_swa(x.full)
        tree.swa_evictable -= len(x.swa)
        freed["swa"] += len(x.swa)
        tree.lru_remove(x)
        x.swa = None
    x.full = None
    tree.leaves.discard(x)
    del x.parent.children[tree.child_key(x.key)]
    tree.update_leaf(x.parent)



def _lru_prev_unlocked(tree: SWARadixCache, i: int) -> SWANode | None:
    """The first node from index i towards the most recent end that no request SWA-locks."""
    while i >= 0:
        if tree.lru[i].swa_lock == 0:
            return tree.lru[i]
        i -= 1
    return None