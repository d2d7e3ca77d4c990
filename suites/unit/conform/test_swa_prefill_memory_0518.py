"""The SWA memory side of admission under sglang-pre-35265 against SGLang 0.5.18's own PrefillAdder.

As test_swa_prefill_memory_vs_sglang.py does against 0.5.23, in CI's 0.5.18 venv (skipped
elsewhere): an engine with SWA layers runs under ``admission = "sglang"`` with pools small
enough for memory to bind; before every admission its state, the scheduler's new-token
ratio included, goes to 0.5.18's adder (compiled from its schedule_policy.py, its
allocator a stand-in of ``SWATokenToKVPoolAllocator`` so the adder takes its hybrid-SWA
branches). The requests admitted, each chunk's end and the adder's offsets (total,
current, SWA) must equal kvbench's. 0.5.18's hybrid-SWA rules differ from 0.5.23's where
the full-attention ones do (test_prefill_memory_0518.py): the decoding requests' outputs
at the ratio, and no extra page in ``add_one_req_ignore_eos``.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mini_engine.request import Request
from suites.unit.conform.test_prefill_memory_0518 import PROFILE, compile_adder_0518, run_adder_0518
from suites.unit.conform.test_swa_prefill_memory_vs_sglang import Pools, _SWAAlloc, compared_batches


@pytest.fixture(scope="module")
def swa_adder_0518(sg0518):
    return compile_adder_0518(_SWAAlloc)


def admission_0518(sgc, ps: int, chunk: int, cache: str, pools: Pools, decoding: list[Request],
                   chunked: Request | None, waiting: list[Request], ratio: float):
    """0.5.18's batch for this state: [(rid, start, end)] and (total, current, swa, rem_input)."""
    tree = SimpleNamespace(disable=cache == "chunk", supports_mamba=lambda: False,
                           evictable_size=lambda: pools.full_evictable,
                           full_evictable_size=lambda: pools.full_evictable,
                           swa_evictable_size=lambda: pools.swa_evictable, sliding_window_size=pools.window,
                           is_tree_cache=lambda: False, inc_lock_ref=lambda node: SimpleNamespace(
                               swa_uuid_for_lock=None), dec_lock_ref=lambda node, *a: None)
    alloc = _SWAAlloc(page_size=ps, full_available_size=lambda: pools.full_free,
                      swa_available_size=lambda: pools.swa_free, size_swa=pools.swa_size)
    batch, adder = run_adder_0518(sgc, ps, chunk, tree, alloc, decoding, chunked, waiting, ratio)
    assert adder.is_hybrid_swa
    return batch, (adder.rem_total_token_offset, adder.cur_rem_token_offset, adder.rem_swa_token_offset,
                   adder.rem_input_tokens)


def compared_0518(sgc, reqs, ps, chunk, pool, window, ratio, cache) -> int:
    return compared_batches(sgc, reqs, ps, chunk, pool, window, ratio, cache, profile=PROFILE,
                            admission=admission_0518)


@settings(max_examples=20, deadline=None)
@given(reqs=st.lists(st.tuples(st.integers(1, 700), st.integers(1, 400), st.integers(0, 30)), min_size=1, max_size=8),
       ps=st.sampled_from([4, 16]), chunk_pages=st.integers(2, 16), pool_pages=st.integers(24, 80),
       window=st.sampled_from([32, 128, 512]), ratio=st.sampled_from([0.25, 0.5, 0.8, 1.0]),
       cache=st.sampled_from(["radix", "chunk"]))
def test_swa_admissions_equal_0518s(swa_adder_0518, reqs, ps, chunk_pages, pool_pages, window, ratio, cache):
    chunk = chunk_pages * max(ps, 16)
    pool = pool_pages * max(ps, 32)
    reqs = [(n, o, a) for n, o, a in reqs if n + o + 2 * max(ps, 16) < pool * ratio] or [(10, 10, 0)]
    compared_0518(swa_adder_0518, reqs, ps, chunk, pool, window, ratio, cache)


@pytest.mark.parametrize("cache", ["radix", "chunk"])
def test_a_bound_swa_pool_is_compared_pass_by_pass(swa_adder_0518, cache):
    """Not vacuous: eight 300-token prompts with 200 outputs each, window 128, an SWA pool of
    a quarter of 4,096 tokens, arriving two steps apart."""
    reqs = [(300, 200, a) for a in range(0, 16, 2)]
    assert compared_0518(swa_adder_0518, reqs, 16, 512, 4096, 128, 0.25, cache) >= 3
