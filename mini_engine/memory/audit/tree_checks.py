"""K12-K14: the radix prefix tree's locks (memory/tree/prefix.py), and the SWA-aware tree's
slots (memory/tree/swa_radix.py), as state checks.

A request holds one lock, on the node its row's protected prefix ends on, and a
lock counts on every node from there up to the root (SGLang's inc_lock_ref). So
after every step:

* K12, no locked node evicted: each request's locked node is still attached to the
  tree (every node on its path is its parent's child), and covers exactly the
  request's protected prefix.
* K13, lock counts: every node's lock_ref equals the number of requests whose path
  runs through it (never negative, never left over), and the tree's protected size
  is the length of those nodes' keys.

Cost: the depth of each request's path, not the tree's size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mini_engine.memory.audit.record import Violation

if TYPE_CHECKING:
    from mini_engine.memory.manager import KVManager
    from mini_engine.memory.tree.swa_radix import SWARadixCache


def check_k12(m: KVManager, step: int) -> list[Violation]:
    """K12: each request's locked node is in the tree and ends at its protected length."""
    prefix = m.prefix
    if prefix is None:
        return []
    out, root = [], prefix.tree.root
    for row, node in prefix.locks.items():
        state = m.states.get(row)
        depth, x, attached = 0, node, True
        while x is not root:
            parent = x.parent
            if parent is None or parent.children.get(prefix.tree._child_key(x.key)) is not x:
                attached = False
                break
            depth += len(x.key)
            x = parent
        protected = state.protected if state is not None else -1
        if not attached or state is None or depth != protected:
            out.append(Violation("K12", state.rid if state is not None else None, step, {
                "row": row, "attached": attached, "depth": depth, "protected": protected}))
    return out


def check_k13(m: KVManager, step: int) -> list[Violation]:
    """K13: lock_ref of each node == requests locking through it; protected_size matches."""
    prefix = m.prefix
    if prefix is None:
        return []
    tree, counts = prefix.tree, {}
    for node in prefix.locks.values():
        x = node
        while x is not tree.root and x is not None:
            counts[x] = counts.get(x, 0) + 1
            x = x.parent
    out = [Violation("K13", None, step, {"node": x.id, "lock_ref": x.lock_ref, "requests": n})
           for x, n in counts.items() if x.lock_ref != n]
    protected = sum(len(x.key) for x in counts)
    if protected != tree.protected_size or tree.evictable_size < 0:
        out.append(Violation("K13", None, step, {"protected_size": tree.protected_size, "locked_tokens": protected,
                                                 "evictable_size": tree.evictable_size}))
    return out


def check_k14(m: KVManager, step: int) -> list[Violation]:
    """K14 on the manager's SWA-aware tree (memory/tree/swa_prefix.py); nothing without one."""
    tree = getattr(m.prefix, "tree", None)
    return swa_tree_violations(tree, step) if hasattr(tree, "swa_map") else []


def swa_tree_violations(tree: SWARadixCache, step: int = 0) -> list[Violation]:
    """K14, the SWA-aware tree (memory/tree/swa_radix.py): a tombstone holds no SWA page (the
    pool's map names none for its FULL slots), a live node's SWA slots are the ones the map
    names, the four sizes are the nodes' tokens split by their locks (SWA protected = the
    SWA-locked live nodes), and no eviction freed a node some request SWA-locked."""
    full_ev = full_pr = swa_ev = swa_pr = 0  # every step: one walk, plain locals
    nodes = list(tree.nodes())
    for x in nodes:
        if x.full_lock:
            full_pr += len(x.key)
        else:
            full_ev += len(x.key)
        if x.swa is not None:
            if x.swa_lock:
                swa_pr += len(x.swa)
            else:
                swa_ev += len(x.swa)
    sizes = {"full_evictable": full_ev, "full_protected": full_pr, "swa_evictable": swa_ev, "swa_protected": swa_pr}
    out = [v for x in _k14_suspects(tree, nodes) if (v := _k14_node(tree, x, step)) is not None]
    have = {"full_evictable": tree.full_evictable, "full_protected": tree.full_protected,
            "swa_evictable": tree.swa_evictable, "swa_protected": tree.swa_protected}
    if have != sizes:
        out.append(Violation("K14", None, step, {"reason": "sizes", "counted": sizes, "tree": have}))
    for nid in tree.locked_evictions:
        out.append(Violation("K14", None, step, {"node": nid, "reason": "a SWA-locked node was evicted"}))
    return out


def _k14_suspects(tree: SWARadixCache, nodes: list) -> list:
    """The nodes _k14_node may find in breach (the rest it clears), in tree order: one map
    read of every node's slots instead of one per node, every step."""
    tombs, live, odd = [], [], False
    for x in nodes:
        if x.swa is None:
            tombs.append(x.full)
        elif len(x.swa) == len(x.full):
            live.append(x)
        else:
            odd = True
    suspect_tombs = bool(tombs) and bool(tree.swa_map[np.concatenate(tombs)].any())
    suspect_live = bool(live) and bool((tree.swa_map[np.concatenate([x.full for x in live])]
                                        != np.concatenate([x.swa for x in live])).any())
    if not (odd or suspect_tombs or suspect_live):
        return []
    return [x for x in nodes if (suspect_tombs if x.swa is None
                                 else suspect_live if len(x.swa) == len(x.full) else True)]


def _k14_node(tree: SWARadixCache, x, step: int) -> Violation | None:
    """K14's slot test of one node: a tombstone maps no SWA page, a live node's SWA slots are the map's."""
    mapped = tree.swa_map[x.full]
    if x.swa is None:
        if mapped.any():
            return Violation("K14", None, step, {"node": x.id, "reason": "a tombstone holds SWA pages",
                                                 "swa": mapped[mapped > 0][:8].tolist()})
        return None
    if not np.array_equal(mapped, x.swa):
        return Violation("K14", None, step, {"node": x.id, "reason": "SWA slots are not the map's"})
    return None
