"""Sizing formulas of the KV accounting (DESIGN.md section 1).

Plain integer arithmetic on the host. Every function validates its sizes so a bad
option fails with one line naming the parameter, not with a wrong number later.
"""

from __future__ import annotations

import numpy as np

from mini_engine.errors import check_choice, check_positive
from mini_engine.memory.rules import POLICIES


def ceil_ps(x: int, ps: int) -> int:
    """Smallest multiple of ps that is >= x."""
    x = check_positive("length", x, minimum=0)
    ps = check_positive("page_size", ps, minimum=1)
    return -(-x // ps) * ps


def floor_ps(x: int, ps: int) -> int:
    """Largest multiple of ps that is <= x."""
    x = check_positive("length", x, minimum=0)
    ps = check_positive("page_size", ps, minimum=1)
    return x // ps * ps


def dflash_reserve(block_size: int) -> int:
    """DFLASH double buffer: two draft blocks (one in flight, one being planned)."""
    return 2 * check_positive("block_size", block_size, minimum=1)


def eagle_width(page_size: int, topk: int, steps: int, num_draft_tokens: int) -> int:
    """Slots one EAGLE step may write: with topk > 1 and paging, each branch may straddle a page."""
    ps = check_positive("page_size", page_size, minimum=1)
    topk = check_positive("topk", topk, minimum=1)
    steps = check_positive("steps", steps, minimum=1)
    ndt = check_positive("num_draft_tokens", num_draft_tokens, minimum=1)
    if ps == 1 or topk == 1:
        return max(steps * topk, ndt)
    pages_per_branch = -(-(ps - 1 + steps) // ps)
    return max(pages_per_branch * ps * topk, ndt)


def eagle_reserve(page_size: int, topk: int, steps: int, num_draft_tokens: int) -> int:
    return 2 * eagle_width(page_size, topk, steps, num_draft_tokens)


def plan_extent(cur: int, committed: int, reserve: int, page_size: int, policy: str) -> int:
    """Next extent of one request before a speculative step; never below the current one."""
    cur = check_positive("cur", cur, minimum=0)
    committed = check_positive("committed", committed, minimum=0)
    reserve = check_positive("reserve", reserve, minimum=0)
    ps = check_positive("page_size", page_size, minimum=1)
    check_choice("policy", policy, POLICIES)
    return int(next_extents(cur, committed, reserve, ps, policy == "aligned"))


def next_extents(cur, committed, reserve: int, page_size: int, aligned: bool):
    """plan_extent over whole batches (numpy arrays or ints), unchecked: the per-step path.

    The one copy of the reservation rule: the manager plans with it and the batch
    arrays re-derive it from their own arrays, so K10 compares two inputs, not two rules.
    """
    if aligned:  # ceil_ps(committed + reserve)
        want = committed + (reserve + page_size - 1)
        want = want - want % page_size
    else:
        want = committed + reserve
    return np.maximum(cur, want)


def _window_tail(length: int, window: int, ps: int) -> int:
    # What a windowed cache keeps: whole pages are freed only below the window, so the
    # kept tail is the window widened down to a page boundary.
    return length - max(0, length - window) // ps * ps


def swa_tail_len(fill_len: int, window: int, page_size: int) -> int:
    """SWA positions a PD-transferred request keeps: the window, widened down to a page boundary."""
    fill_len = check_positive("fill_len", fill_len, minimum=0)
    window = check_positive("window", window, minimum=1)
    ps = check_positive("page_size", page_size, minimum=1)
    return _window_tail(fill_len, window, ps)


def compact_draft_len(seq_len: int, draft_window: int, page_size: int) -> int:
    """Exact compact draft cache length: whole pages below the window are freed (a saw-tooth)."""
    seq_len = check_positive("seq_len", seq_len, minimum=0)
    dw = check_positive("draft_window", draft_window, minimum=1)
    ps = check_positive("page_size", page_size, minimum=1)
    return _window_tail(seq_len, dw, ps)


def compact_draft_bound(seq_len: int, draft_window: int, page_size: int) -> int:
    """Monotone host envelope of compact_draft_len (plannable without reading the device)."""
    seq_len = check_positive("seq_len", seq_len, minimum=0)
    dw = check_positive("draft_window", draft_window, minimum=1)
    ps = check_positive("page_size", page_size, minimum=1)
    return min(seq_len, dw + (ps if ps > 1 else 0))


def row_width(max_context: int, reserve: int, page_size: int, speculative: bool) -> int:
    """req_to_token row width: an aligned reservation may overshoot committed + reserve by ps - 1."""
    ctx = check_positive("max_context", max_context, minimum=1)
    ps = check_positive("page_size", page_size, minimum=1)
    if not speculative:
        return ctx + ps - 1
    reserve = check_positive("reserve", reserve, minimum=1)
    return ctx + reserve + ps - 1


def pd_swa_tail_len(fill_len: int, window: int, page_size: int, radix: bool = False) -> int:
    """SWA positions SGLang 0.5.23's decode side preallocates for a transferred request.

    It takes the tail path only when ps > 1: at ps 1 the whole fill gets SWA slots
    (the cursor stays 0). With the decode-side radix cache the window starts below
    the last committed position, max(window, ps) back, page-floored.
    """
    fill_len = check_positive("fill_len", fill_len, minimum=0)
    window = check_positive("window", window, minimum=1)
    ps = check_positive("page_size", page_size, minimum=1)
    if ps == 1:
        return fill_len
    if radix:
        return fill_len - max(0, fill_len - 1 - max(window, ps)) // ps * ps
    return _window_tail(fill_len, window, ps)


def swa_evict_due(pre_len, cursor, window: int, interval: int):
    """SGLang 0.5.23's eviction interval: whether the cursor may move once pre_len
    positions are final, pre_len - window >= cursor + interval (1 within chunked
    prefill). Ints or whole batches (numpy arrays): the one copy of the rule, read
    by swa_evict_target and by the decode step's pre-filter over its batch."""
    return pre_len - window >= cursor + interval


def swa_evict_target(pre_len: int, cursor: int, window: int, page_size: int, interval: int,
                     prefix_cache: str) -> int:
    """Where SGLang 0.5.23 moves the SWA cursor when pre_len positions are final.

    Nothing moves until the eviction interval is due (swa_evict_due). The
    prefix-sharing (radix) cache then keeps max(window, ps) rounded up to whole
    pages below pre_len; the chunk cache keeps the window. The cursor lands on a
    page boundary and never moves back.
    """
    if not swa_evict_due(pre_len, cursor, window, interval):
        return cursor
    if prefix_cache == "chunk":
        threshold = pre_len - window
    else:
        threshold = pre_len - -(-max(window, page_size) // page_size) * page_size
    return max(cursor, threshold) // page_size * page_size
