"""The SWA-aware tree's locks (swa_radix.SWARadixCache), as plain functions over the tree.

A request's lock on the node its prefix ends on has two parts. FULL locks the whole path
to the root, as the full tree does. SWA locks only the trailing nodes covering ``window``
tokens (tombstones counted), and stamps the last of them with a uuid the release stops at:
older SWA slots are outside every window the request will read, so they stay evictable.
A locked node is never a leaf to evict; its SWA slots are protected, not evictable.

The early window-lock release (``dec_swa_lock_only``, SGLang's ``release_swa``) drops a
lock's SWA part alone; the lock's later release then drops its FULL part only.

0.5.18's tree core (``tree.release == "0.5.18"``, its swa_component.py
acquire_component_lock / release_component_lock / release_window_lock) walks the window
otherwise: a tombstone is passed over, neither locked nor counted (the window is counted
in live SWA tokens, so the walk climbs past tombstones), and its id goes into the
receipt (``skip_lock_node_ids``); the release passes over those nodes and any node
whose SWA lock is already 0. Its receipt is then (uuid, skipped ids).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the tree calls in here; importing it at run time would be a cycle
    from mini_engine.memory.swa_radix import SWANode, SWARadixCache


def inc_lock_ref(tree: SWARadixCache, node: SWANode) -> tuple[int, object]:
    """Lock node's path (FULL) and its trailing window (SWA); returns (the change of the
    FULL evictable size, the receipt its release takes: the SWA boundary uuid the release
    stops at; 0.5.18's tree core: (that uuid, the tombstones the lock passed over))."""
    delta, x = 0, node
    while x is not tree.root:
        if x.full_lock == 0:
            tree.full_evictable -= len(x.key)
            tree.full_protected += len(x.key)
            delta -= len(x.key)
        x.full_lock += 1
        tree.leaves.discard(x)
        x = x.parent
    uuid, skipped = _lock_window(tree, node, live_only=tree.release == "0.5.18")
    return delta, ((uuid, frozenset(skipped)) if tree.release == "0.5.18" else uuid)


def dec_lock_ref(tree: SWARadixCache, node: SWANode, uuid: int | None, skip_swa: bool = False) -> int:
    """Release a lock inc_lock_ref took (uuid: what it returned); returns the FULL evictable
    change. skip_swa: its SWA part went early (dec_swa_lock_only), only the FULL part is left."""
    if not skip_swa:
        if tree.release == "0.5.18":
            _release_0518(tree, node, uuid, window_only=False)
        else:
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
        if tree.release == "0.5.18":
            _release_0518(tree, node, uuid, window_only=True)
        else:
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


def _lock_window(tree: SWARadixCache, node: SWANode, live_only: bool) -> tuple[int | None, set[int]]:
    """The SWA lock on node's trailing window; (the boundary's uuid, the tombstones passed
    over). live_only (0.5.18): a tombstone is passed over, neither locked nor counted."""
    covered, uuid, skipped, x = 0, None, set(), node
    while x is not tree.root and covered < tree.window:
        if live_only and x.swa is None:  # nothing to protect
            skipped.add(x.id)
            x = x.parent
            continue
        if x.swa_lock == 0 and x.swa is not None:
            tree.swa_evictable -= len(x.swa)
            tree.swa_protected += len(x.swa)
        x.swa_lock += 1
        covered += len(x.key)  # a live node's SWA slots are as many as its key's tokens
        if covered >= tree.window:
            if x.uuid is None:
                tree.uuids += 1
                x.uuid = tree.uuids
            uuid = x.uuid
        x = x.parent
    tree.update_leaf(node)
    return uuid, skipped


def _release_0518(tree: SWARadixCache, node: SWANode, receipt, window_only: bool) -> None:
    """0.5.18's release_component_lock (window_only: release_window_lock): the nodes the lock
    skipped, and any whose SWA lock is 0, are passed over (release_window_lock passes over
    every tombstone, and stops there too where it carries the uuid)."""
    uuid, skipped = receipt
    x = node
    while x is not tree.root:
        stop = uuid is not None and x.uuid == uuid
        passed = x.swa_lock == 0 or (x.swa is None if window_only else x.id in skipped)
        if not passed:
            if x.swa_lock == 1:
                tree.swa_evictable += len(x.swa)
                tree.swa_protected -= len(x.swa)
            x.swa_lock -= 1
            if x.swa_lock == 0:
                tree.update_leaf(x)
        x = x.parent
        if stop and (window_only or not passed):
            break
