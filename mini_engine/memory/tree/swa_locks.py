"""The SWA-aware tree's locks (swa_radix.SWARadixCache), as plain functions over the tree.

A request's lock on the node its prefix ends on has two parts. FULL locks the whole path
to the root, as the full tree does. SWA locks only the trailing nodes covering ``window``
tokens (tombstones counted), and stamps the last of them with a uuid the release stops at:
older SWA slots are outside every window the request will read, so they stay evictable.
A locked node is never a leaf to evict; its SWA slots are protected, not evictable.

The early window-lock release (``dec_swa_lock_only``, SGLang's ``release_swa``) drops a
lock's SWA part alone; the lock's later release then drops its FULL part only.

0.5.18's tree core (``tree.live_window``, its swa_component.py
acquire_component_lock / release_component_lock / release_window_lock) walks the window
otherwise: a tombstone is passed over, neither locked nor counted (the window is counted
in live SWA tokens, so the walk climbs past tombstones), and its id goes into the
receipt (``skip_lock_node_ids``); the release passes over those nodes and any node
whose SWA lock is already 0.

A lock's receipt, what its releases take back, is (the boundary's uuid or None, the ids
of the tombstones it passed over: always none under 0.5.23's core).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:  # the tree calls in here; importing it at run time would be a cycle
    from mini_engine.memory.tree.swa_radix import SWANode, SWARadixCache


class Receipt(NamedTuple):
    uuid: int | None  # the window's boundary stamp, where the lock covered a whole window
    skipped: frozenset[int]  # the tombstones 0.5.18's lock passed over


def window(tree: SWARadixCache, node: SWANode) -> tuple[list[SWANode], set[int], bool]:
    """What an SWA window lock on node takes, read only: the nodes it locks (node first),
    the tombstones it passes over (0.5.18's core; 0.5.23's counts and locks them), and
    whether they cover a whole window (the last then carries the boundary uuid)."""
    taken, skipped, covered, x = [], set(), 0, node
    while x is not tree.root and covered < tree.window:
        if tree.live_window and x.swa is None:  # nothing to protect
            skipped.add(x.id)
        else:
            taken.append(x)
            covered += len(x.key)  # a live node's SWA slots are as many as its key's tokens
        x = x.parent
    return taken, skipped, covered >= tree.window


def pins(tree: SWARadixCache, node: SWANode) -> int:
    """The evictable SWA tokens a lock on node would protect (its window's unlocked live nodes)."""
    taken, _, _ = window(tree, node)
    return sum(len(x.swa) for x in taken if x.swa_lock == 0 and x.swa is not None)


def inc_lock_ref(tree: SWARadixCache, node: SWANode) -> tuple[int, Receipt]:
    """Lock node's path (FULL) and its trailing window (SWA); returns (the change of the
    FULL evictable size, the receipt its releases take)."""
    delta, x = 0, node
    while x is not tree.root:
        if x.full_lock == 0:
            tree.full_evictable -= len(x.key)
            tree.full_protected += len(x.key)
            delta -= len(x.key)
        x.full_lock += 1
        tree.leaves.discard(x)
        x = x.parent
    taken, skipped, whole = window(tree, node)
    for x in taken:
        if x.swa_lock == 0 and x.swa is not None:
            tree.swa_evictable -= len(x.swa)
            tree.swa_protected += len(x.swa)
        x.swa_lock += 1
    uuid = None
    if whole:
        last = taken[-1]
        if last.uuid is None:
            tree.uuids += 1
            last.uuid = tree.uuids
        uuid = last.uuid
    tree.update_leaf(node)
    return delta, Receipt(uuid, frozenset(skipped))


def dec_lock_ref(tree: SWARadixCache, node: SWANode, receipt: Receipt, skip_swa: bool = False) -> int:
    """Release a lock inc_lock_ref took (receipt: what it returned); returns the FULL evictable
    change. skip_swa: its SWA part went early (dec_swa_lock_only), only the FULL part is left."""
    if not skip_swa:
        _release(tree, node, receipt, window_only=False)
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


def dec_swa_lock_only(tree: SWARadixCache, node: SWANode, receipt: Receipt) -> None:
    """SGLang's early release of a lock's SWA part (``release_swa``): once a request's
    window has left its prefix the prefix's SWA becomes evictable, while the FULL lock
    stays (the request still reads that KV through full attention). At most once per lock;
    its dec_lock_ref then passes skip_swa."""
    if node is not tree.root:
        _release(tree, node, receipt, window_only=True)


def _release(tree: SWARadixCache, node: SWANode, receipt: Receipt, window_only: bool) -> None:
    """The SWA lock from node up to the node stamped with the receipt's uuid (to the root
    without one); window_only: the early release (release_window_lock in 0.5.18).

    0.5.18's core (release_component_lock) passes over the nodes the lock skipped, and any
    whose SWA lock is 0; its release_window_lock passes over every tombstone, and stops at
    the uuid only on a node it released or on the early release. 0.5.23's passes over none.
    SGLang's early release would also evict a released node that is an evictable leaf at
    once; a FULL-locked path has none (the request's FULL lock keeps every node on it),
    and every release here leaves that lock in place or releases it right after."""
    uuid, skipped = receipt
    x = node
    while x is not tree.root:
        stop = uuid is not None and x.uuid == uuid
        passed = tree.live_window and (x.swa_lock == 0 or (x.swa is None if window_only else x.id in skipped))
        if not passed:
            if x.swa_lock <= 0:
                raise ValueError(f"SWA lock release on an unlocked node (id {x.id})")
            if x.swa_lock == 1 and x.swa is not None:
                tree.swa_evictable += len(x.swa)
                tree.swa_protected -= len(x.swa)
            x.swa_lock -= 1
            if x.swa_lock == 0:
                tree.update_leaf(x)
        x = x.parent
        if stop and (window_only or not passed):
            break
