"""The scheduler's side of the radix prefix cache (memory/tree/prefix.py): what it looks up and when.

Admission looks up prompt + outputs so far (a retracted request matches what it had
computed; SGLang's fill_ids), and a prefill result checkpoints what is committed
(SGLang's checkpoint_kv_cache after an extend, cache_unfinished_req in older
versions). A finish inserts through the release (Scheduler._leave).
"""

from __future__ import annotations

import numpy as np

from mini_engine.memory.sizing import pd_swa_tail_len
from mini_engine.request import Request


def prefix_match(manager, r: Request):
    """(slots, node) of r's cached prefix, or None when the manager runs no prefix tree."""
    prefix = manager.prefix
    if prefix is None:
        return None
    return prefix.match(np.asarray(r.tokens(0, r.seq_len), dtype=np.int64), r.rid)


def pd_prefix_match(manager, r: Request):
    """(slots, node) of a PD arrival's prompt in the decode side's tree, or None without one
    (SGLang's DecodePreallocQueue._match_prefix_and_lock under
    --disaggregation-decode-enable-radix-cache). The whole prompt is looked up: the prefill
    node computed it, the decode side only reuses what it holds. 0.5.23 stops the key below
    the SWA tail (max_prefix_len = fill - _swa_tail_len(fill)), which is always transferred
    fresh; 0.5.18 has no such cap.

    Example (0.5.23, ps 16, window 32, a 100-token prompt): the window starts at
    max(0, 99 - 32) = 67, floored to 64: the tail is 36 tokens and at most 64 are matched."""
    prefix = manager.prefix
    if prefix is None:
        return None
    fill, m = r.fill_len, manager.mem
    limit = fill - pd_swa_tail_len(fill, m.window, m.page_size, True) if _tail_0523(manager) else fill
    return prefix.match(np.asarray(r.tokens(0, limit), dtype=np.int64), r.rid, whole=True)


def _tail_0523(manager) -> bool:
    """0.5.23's decode side on the SWA tail path (an SWA pool, ps > 1), which keeps its
    decode-radix rules (MemoryRules.pd_radix_tail)."""
    m = manager.mem
    return manager.swa is not None and m.page_size > 1 and m.rules.pd_radix_tail


def pd_releases_swa(manager, matched: int) -> bool:
    """Whether a PD arrival's match lock gives its SWA part back at once (0.5.23, on the SWA
    tail path, after a hit: the tail is transferred fresh, so the prefix's window is not
    read; UnifiedRadixCache.release_swa, whatever the lock's length)."""
    return matched > 0 and _tail_0523(manager)


def pd_match_pins(manager, match) -> tuple[int, int]:
    """The (full, SWA) evictable tokens a PD arrival's match lock holds when SGLang reads its
    prealloc budget (after the lock and release_swa)."""
    if match is None:
        return 0, 0
    released = pd_releases_swa(manager, len(match[0]))
    return pinned_by_match(manager, match), 0 if released else swa_pinned_by_match(manager, match)


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


def swa_pinned_by_match(manager, match) -> int:
    """Evictable SWA tokens a match's lock would pin (the SWA-aware tree's inc_lock_ref, read
    only): the SWA tokens of the unlocked nodes its window lock takes (swa_locks.window, per
    release; SWARadixCache.lock_pins). 0 without an SWA-aware tree."""
    if match is None or manager.swa is None or manager.prefix is None:
        return 0
    return manager.prefix.tree.lock_pins(match[1])  # with an SWA pool, the SWA-aware tree


def match_pins(manager, match) -> tuple[int, ...]:
    """What the match's lock pins, as PrefillMemory.fits takes it: the full tokens, and with an
    SWA pool the SWA tokens too (SWAPrefillMemory.fits)."""
    full = pinned_by_match(manager, match)
    return (full,) if manager.swa is None else (full, swa_pinned_by_match(manager, match))
