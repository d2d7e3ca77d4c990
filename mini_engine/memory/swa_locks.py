"""The SWA-aware tree's locks (swa_radix.SWARadixCache), as plain functions over the tree.

A request's lock on the node its prefix ends on has two parts. FULL locks the whole path
to the root, as the full tree does. SWA locks only the trailing nodes covering ``window``
tokens (tombstones counted), and stamps the last of them with a uuid the release stops at:
older SWA slots are outside every window the request will read, so they stay evictable.
A locked node is never a leaf to evict; its SWA slots are protected, not evictable.

The early window-lock release (``dec_swa_lock_only``, SGLang's ``release_swa``) drops a
lock's SWA part alone; the lock's later release then drops its FULL part only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the tree calls in here; importing it at run time would be a cycle
    from mini_engine.memory.swa_radix import SWANode, SWARadixCache


def inc_lock_ref(tree: SWARadixCache, node: SWANode) -> tuple[int, int | None]:
    """Lock node's path (FULL) and its trailing window (SWA); returns (the change of the
    FULL evictable size, the SWA boundary uuid the release stops at)."""
    delta, x = 0, node
    while x is not tree.root:
        if x.full_lock == 0:
            tree.full_evictable -= len(x.key)
            tree.full_protected += len(x.key)
            delta -= len(x.key)
        x.full_lock += 1
        tree.leaves.discard(x)
        x = x.parent
    covered, uuid, x = 0, None, node
    while x is not tree.root and covered < tree.window:
        if x.swa_lock == 0 and x.swa is not None:
            tree.swa_evictable -= len(x.swa)
            tree.swa_protected += len(x.swa)
        x.swa_lock += 1
        covered += len(x.key)
        if covered >= tree.window:
            if x.uuid is None:
                tree.uuids += 1
                x.uuid = tree.uuids
            uuid = x.uuid
        x = x.parent
    tree.update_leaf(node)
    return delta, uuid


def dec_lock_ref(tree: SWARadixCache, node: SWANode, uuid: int | None, skip_swa: bool = False) -> int:
    """Release a lock inc_lock_ref took (uuid: what it returned); returns the FULL evictable
    change. skip_swa: its SWA part went early (dec_swa_lock_only), only the FULL part is left."""
    if not skip_swa:
        _release_window(tree, node, uuid)
    delta, x = 0, node
    while x is not tree.root:
        if x.full_lock <= 0:
            raise ValueError(f"FULL lock release on an unlocked node (id {x.id})")
        if x.full_lock == 1:
            tree.full_evictable += len(x.key)
            tree.full_protected -= len(x.key)
            delta += len(x.key)
        x.full_lock -= 1
        if x.full_lock == 0:
            tree.update_leaf(x)
        x = x.parent
    tree.update_leaf(node)
    return delta


def dec_swa_lock_only(tree: SWARadixCache, node: SWANode, uuid: int | None) -> None:
    """SGLang's early release of a lock's SWA part (``release_swa``): once a request's
    window has left its prefix the prefix's SWA becomes evictable, while the FULL lock
    stays (the request still reads that KV through full attention). At most once per lock;
    its dec_lock_ref then passes skip_swa."""
    if node is not tree.root:
        _release_window(tree, node, uuid)


def _release_window(tree: SWARadixCache, node: SWANode, uuid: int | None) -> None:
    """The SWA lock from node up to the node stamped uuid (to the root without one).
    SGLang's early release would also evict a released node that is an evictable leaf
    at once; a FULL-locked path has none (the request's FULL lock keeps every node on
    it), and every release here leaves that lock in place or releases it right after."""
    x = node
    while x is not tree.root:
        if x.swa_lock <= 0:
            raise ValueError(f"SWA lock release on an unlocked node (id {x.id})")
        if x.swa_lock == 1 and x.swa is not None:
            tree.swa_evictable += len(x.swa)
            tree.swa_protected -= len(x.swa)
        x.swa_lock -= 1
        if x.swa_lock == 0:
            tree.update_leaf(x)
        stop = uuid is not None and x.uuid == uuid
        x = x.parent
        if stop:
            break
