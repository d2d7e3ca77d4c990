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
    if manager.swa is None:
        prefix.checkpoint(r.kv, np.asarray(r.tokens(0, up_to), dtype=np.int64), len(r.prompt), up_to)
        return
    _checkpoint_swa(manager, prefix, r, up_to)


def _checkpoint_swa(manager, prefix, r: Request, up_to: int) -> None:
    """The FULL + SWA tree's checkpoint of an unfinished request (SGLang's
    checkpoint_into_tree with the SWA component, 0.5.23 and 0.5.18).

    Before the insert the request's SWA window moves to the key's end
    (free_out_of_window_slots(req, len(key) - 1), interval 1, on by default), so the
    insert records the moved cursor: a long prompt's SWA pages below the window go
    back right after its prefill. Where the request's match had a branching point past
    what it shares (0.5.23's swa_branching_seqlen: the FULL hit ran past the SWA-valid
    part), the key is cut there, so the shared prefix gets this request's live SWA
    (prepare_for_caching_req); once that insert is made the point is cleared and the
    window moves on to the whole key (cleanup_after_caching_req)."""
    bigram = int(prefix.bigram)  # an EAGLE key is one bigram shorter than its tokens
    point = prefix.branching.get(r.rid)
    branch = point is not None and point > r.kv.protected and point + bigram <= up_to
    cut = point + bigram if branch else up_to
    manager.evict_swa(r.kv, cut - bigram - 1, interval=1)
    prefix.checkpoint(r.kv, np.asarray(r.tokens(0, cut), dtype=np.int64), len(r.prompt), cut)
    if branch:  # the branch is in the tree now
        prefix.branching.pop(r.rid, None)
        manager.evict_swa(r.kv, up_to - bigram - 1, interval=1)


def swa_pinned_by_match(manager, match) -> int:
    """Evictable SWA tokens a match's lock would pin (the SWA-aware tree's inc_lock_ref, read
    only): the SWA tokens of the unlocked nodes from the match up until a window's worth of
    positions is covered. 0 without an SWA-aware tree."""
    if match is None or manager.swa is None or manager.prefix is None:
        return 0
    tree = manager.prefix.tree  # with an SWA pool, the SWA-aware tree
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
