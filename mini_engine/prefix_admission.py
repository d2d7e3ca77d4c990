"""The scheduler's side of the radix prefix cache (memory/prefix.py): what it looks up and when.

Admission looks up prompt + outputs so far (a retracted request matches what it had
computed; SGLang's fill_ids), and a prefill result checkpoints what is committed
(SGLang's checkpoint_kv_cache after an extend, cache_unfinished_req in older
versions). A finish inserts through the release (Scheduler._leave).
"""

from __future__ import annotations

import numpy as np

from mini_engine.request import Request


def prefix_match(manager, r: Request):
    """(slots, node) of r's cached prefix, or None when the manager runs no prefix tree."""
    prefix = manager.prefix
    if prefix is None:
        return None
    return prefix.match(np.asarray(r.tokens(0, r.seq_len), dtype=np.int64), r.rid)


def pinned_by_match(manager, match) -> int:
    """Evictable tokens a match's lock would pin: its node and the unlocked ancestors. SGLang's
    PrefillAdder holds the match locked while it tests the request (_lock_node), so those
    tokens are not room for it."""
    if match is None:
        return 0
    node, root, pinned = match[1], manager.prefix.tree.root, 0
    while node is not root:
        if node.lock_ref == 0:
            pinned += len(node.key)
        node = node.parent
    return pinned


def checkpoint_prefill(manager, r: Request) -> None:
    """After a prefill chunk of r landed (r still running): the tree takes its committed prefix."""
    prefix = manager.prefix
    if prefix is None or r.kv is None:
        return
    up_to = min(r.kv.committed, r.seq_len)
    prefix.checkpoint(r.kv, np.asarray(r.tokens(0, up_to), dtype=np.int64), len(r.prompt), up_to)


def swa_pinned_by_match(manager, match) -> int:
    """Evictable SWA tokens a match's lock would pin (the SWA-aware tree's inc_lock_ref, read
    only): the SWA tokens of the unlocked nodes from the match up until a window's worth of
    positions is covered. 0 without an SWA-aware tree."""
    tree = getattr(manager.prefix, "tree", None)
    if match is None or not hasattr(tree, "swa_evictable"):
        return 0
    node, covered, pinned = match[1], 0, 0
    while node is not tree.root and covered < tree.window:
        if node.swa_lock == 0 and node.swa is not None:
            pinned += len(node.swa)
        covered += len(node.key)
        node = node.parent
    return pinned


def match_pins(manager, match) -> tuple[int, ...]:
    """What the match's lock pins, as PrefillMemory.fits takes it: the full tokens, and with an
    SWA pool the SWA tokens too (SWAPrefillMemory.fits)."""
    full = pinned_by_match(manager, match)
    return (full,) if manager.swa is None else (full, swa_pinned_by_match(manager, match))
