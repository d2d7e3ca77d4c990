"""Sizing formulas: DESIGN.md section 1 worked numbers, validation, the compact-draft bound."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mini_engine.errors import ConfigError
from mini_engine.memory.sizing import (ceil_ps, compact_draft_bound, compact_draft_len, dflash_reserve, eagle_reserve,
                                       eagle_width, floor_ps, plan_extent, row_width, swa_evict_due, swa_evict_target,
                                       swa_tail_len)


def test_ceil_floor():
    assert ceil_ps(37, 16) == 48 and floor_ps(37, 16) == 32
    assert ceil_ps(48, 16) == 48 and floor_ps(48, 16) == 48
    assert ceil_ps(0, 16) == 0 and ceil_ps(5, 1) == 5


def test_dflash_worked_example():
    reserve = dflash_reserve(16)
    assert reserve == 32
    assert plan_extent(37, 37, reserve, 16, "unaligned") == 69
    assert plan_extent(48, 37, reserve, 16, "aligned") == 80
    assert plan_extent(80, 42, reserve, 16, "aligned") == 80
    assert plan_extent(80, 61, reserve, 16, "aligned") == 96


def test_eagle_chain_worked_example():
    assert eagle_width(16, 1, 3, 4) == 4
    reserve = eagle_reserve(16, 1, 3, 4)
    assert reserve == 8
    assert plan_extent(37, 37, reserve, 16, "unaligned") == 45
    assert ceil_ps(45, 16) - 45 == 3
    assert plan_extent(37, 37, reserve, 16, "aligned") == 48


def test_eagle_tree_worked_example():
    assert eagle_width(16, 4, 3, 8) == 128
    assert eagle_reserve(16, 4, 3, 8) == 256
    assert plan_extent(48, 37, 256, 16, "aligned") == 304


def test_eagle_width_page_one_or_chain():
    assert eagle_width(1, 4, 3, 8) == 12
    assert eagle_width(1, 1, 3, 8) == 8
    assert eagle_width(64, 1, 5, 2) == 5


def test_swa_worked_example():
    tail = swa_tail_len(50, 32, 16)
    assert tail == 34 and 50 - tail == 16
    assert swa_tail_len(20, 32, 16) == 20  # shorter than the window: everything kept


def test_plan_extent_never_goes_back():
    assert plan_extent(200, 10, 8, 16, "aligned") == 200
    assert plan_extent(200, 10, 8, 16, "unaligned") == 200


def test_row_width_headroom():
    assert row_width(100, 32, 16, True) == 100 + 32 + 15
    assert row_width(100, 32, 16, False) == 115


@pytest.mark.parametrize("call, name", [
    (lambda: ceil_ps(3, 0), "page_size"),
    (lambda: floor_ps(3, -1), "page_size"),
    (lambda: dflash_reserve(0), "block_size"),
    (lambda: eagle_width(16, 0, 3, 4), "topk"),
    (lambda: eagle_width(16, 1, 0, 4), "steps"),
    (lambda: eagle_width(16, 1, 3, 0), "num_draft_tokens"),
    (lambda: eagle_width(0, 1, 3, 4), "page_size"),
    (lambda: swa_tail_len(50, 0, 16), "window"),
    (lambda: plan_extent(0, 0, 8, 16, "rounded"), "policy"),
    (lambda: compact_draft_len(10, 0, 16), "draft_window"),
    (lambda: row_width(0, 8, 16, True), "max_context"),
    (lambda: ceil_ps(2.5, 16), "length"),
])
def test_invalid_sizes_name_the_parameter(call, name):
    with pytest.raises(ConfigError) as err:
        call()
    msg = str(err.value)
    assert msg.startswith(name) and ("must be" in msg) and "\n" not in msg


def _drafter_cache_len(seq_len: int, window: int, ps: int) -> int:
    """A literal drafter: append positions one by one, free every whole page that falls below the window."""
    kept_from = 0
    for n in range(1, seq_len + 1):
        while kept_from + ps <= n - window:
            kept_from += ps
    return seq_len - kept_from


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 600), st.integers(1, 200), st.sampled_from([1, 2, 16, 64]))
def test_compact_draft_len_matches_a_literal_drafter(seq_len, window, ps):
    assert compact_draft_len(seq_len, window, ps) == _drafter_cache_len(seq_len, window, ps)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 800), st.integers(1, 300), st.sampled_from([1, 2, 16, 64, 256]))
def test_compact_bound_is_never_below_any_shorter_exact_length(estimate, window, ps):
    # K9: the host plans with bound(estimate); the true length may be anything <= estimate.
    bound = compact_draft_bound(estimate, window, ps)
    assert all(compact_draft_len(t, window, ps) <= bound for t in range(estimate + 1))
    assert compact_draft_bound(estimate + 1, window, ps) >= bound  # monotone envelope


@given(st.lists(st.tuples(st.integers(0, 2000), st.integers(0, 2000)), min_size=1, max_size=20),
       st.integers(1, 300), st.integers(1, 200), st.sampled_from([1, 16, 64]), st.sampled_from(["radix", "chunk"]))
def test_the_batch_interval_test_is_the_targets_own(pairs, window, interval, ps, prefix_cache):
    # The decode step's pre-filter asks swa_evict_due over whole batches: a request it
    # leaves out is one whose cursor swa_evict_target would not move.
    pre = np.array([p for p, _ in pairs]); cur = np.array([c // ps * ps for _, c in pairs])
    due = swa_evict_due(pre, cur, window, interval)
    for p, c, d in zip(pre.tolist(), cur.tolist(), due.tolist()):
        moved = swa_evict_target(p, c, window, ps, interval, prefix_cache) != c
        assert d == swa_evict_due(p, c, window, interval) and (d or not moved)
