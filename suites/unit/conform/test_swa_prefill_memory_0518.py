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

import contextlib
import enum
import logging
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mini_engine.config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.prefill_memory_swa import SWAPrefillMemory
from mini_engine.prefix_admission import prefix_match
from mini_engine.request import Request
from sglang_source import classes
from suites.unit.conform.test_prefill_memory_0518 import PROFILE, _Req
from suites.unit.conform.test_prefill_memory_vs_sglang import MAX_PREFILL_TOKENS
from suites.unit.conform.test_swa_prefill_memory_vs_sglang import Pools


class _SWAAlloc(SimpleNamespace):
    """Stands for SWATokenToKVPoolAllocator: the adder's isinstance test names this class."""


class _Dummy:
    pass


@pytest.fixture(scope="module")
def swa_adder_0518(sg0518):
    ns = {
        "Enum": enum.Enum, "auto": enum.auto, "contextmanager": contextlib.contextmanager,
        "logger": logging.getLogger("sglang-adder-0518"), "CLIP_MAX_NEW_TOKENS": 4096,
        "IGNORE_EOS_RESERVE_TOKENS": 1, "_IS_HIP": False, "PREFILL_TILE_BUDGET": 0, "Optional": object,
        "is_dsa_prefill_cp_in_seq_split": lambda: False, "is_prefill_context_parallel_enabled": lambda: False,
        "SWATokenToKVPoolAllocator": _SWAAlloc,
    }
    for name in ("DeepSeekV4HiSparseTokenToKVPoolAllocator", "PureSWATokenToKVPoolAllocator",
                 "UnifiedMambaTokenToKVPoolAllocator"):
        ns[name] = _Dummy
    classes("sglang.srt.managers.schedule_policy", {"AddReqResult", "PrefillAdder"}, ns)
    return SimpleNamespace(adder=ns["PrefillAdder"], result=ns["AddReqResult"])


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
    running = SimpleNamespace(reqs=[_Req(r) for r in decoding], batch_size=lambda: len(decoding))
    adder = sgc.adder(ps, tree, alloc, running, ratio, MAX_PREFILL_TOKENS, chunk)
    assert adder.is_hybrid_swa
    if chunked is not None:
        adder.add_chunked_req(_Req(chunked, end=chunked.prefill_target, done=chunked.prefilled))
    for r in waiting:
        if adder.budget_state() == sgc.result.OTHER:
            break
        if adder.add_one_req(_Req(r), has_chunked_req=chunked is not None,
                             truncation_align_size=None) != sgc.result.CONTINUE:
            break
    batch = [(q.rid, q.extend_range.start, q.extend_range.end) for q in adder.can_run_list]
    return batch, (adder.rem_total_token_offset, adder.cur_rem_token_offset, adder.rem_swa_token_offset,
                   adder.rem_input_tokens)


def compared_batches(sgc, reqs, ps, chunk, pool, window, ratio, cache) -> int:
    """Run the engine under sglang-pre-35265; check every admission against 0.5.18's adder."""
    cfg = EngineConfig(profile=PROFILE, spec="none", page_size=ps, pool_tokens=pool, chunked_prefill=chunk,
                       prefix_cache=cache, max_running=1024, max_context=8192, admission="sglang", window=window,
                       layer_pattern="1:1", swa_ratio=ratio)
    engine = Engine(cfg)
    engine.submit([Request(rid=i, prompt=list(range(i * 10000, i * 10000 + n)), max_new_tokens=o, arrival_step=a)
                   for i, (n, o, a) in enumerate(reqs)])
    sched, m = engine.sched, engine.manager
    admit, compared = sched.admit, 0

    def checked_admit():
        nonlocal compared
        tree = getattr(m.prefix, "tree", None)
        pools = Pools(m.num_free_pages * ps, m.swa.allocator.num_free_pages * ps, m.swa.allocator.num_pages * ps,
                      window, m.evictable_pages * ps, tree.swa_evictable if tree is not None else 0)
        decoding = sched.decode_batch()
        chunked = next((r for r in sched.running if r.prefilling), None)
        waiting = list(sched.waiting)
        ratio_now = sched.ratio
        # A retracted request matches its own checkpointed chunks; the stand-in tree matches nothing.
        matched = any(len(prefix_match(m, r)[0]) for r in waiting) if m.prefix is not None else False
        chunks, pd = admit()
        if matched or not (waiting or chunked):
            return chunks, pd
        ours = [(c.req.rid, c.start, c.end) for c in chunks]
        mem: SWAPrefillMemory = sched.last_memory
        theirs, budget = admission_0518(sgc, ps, chunk, cache, pools, decoding, chunked, waiting, ratio_now)
        if not theirs and not decoding and not chunked:
            return chunks, pd  # an empty engine: kvbench tries its head request anyway (SGLang would stall)
        assert ours == theirs, (pools, ours, theirs)
        assert (mem.total_offset, mem.current_offset, mem.swa_offset, mem.rem_input) == budget
        compared += 1
        return chunks, pd

    sched.admit = checked_admit
    res = engine.run()
    assert res.verdict in ("ok", "pool_exhausted"), res.error
    return compared


@settings(max_examples=20, deadline=None)
@given(reqs=st.lists(st.tuples(st.integers(1, 700), st.integers(1, 400), st.integers(0, 30)), min_size=1, max_size=8),
       ps=st.sampled_from([4, 16]), chunk_pages=st.integers(2, 16), pool_pages=st.integers(24, 80),
       window=st.sampled_from([32, 128, 512]), ratio=st.sampled_from([0.25, 0.5, 0.8, 1.0]),
       cache=st.sampled_from(["radix", "chunk"]))
def test_swa_admissions_equal_0518s(swa_adder_0518, reqs, ps, chunk_pages, pool_pages, window, ratio, cache):
    chunk = chunk_pages * max(ps, 16)
    pool = pool_pages * max(ps, 32)
    reqs = [(n, o, a) for n, o, a in reqs if n + o + 2 * max(ps, 16) < pool * ratio] or [(10, 10, 0)]
    compared_batches(swa_adder_0518, reqs, ps, chunk, pool, window, ratio, cache)


@pytest.mark.parametrize("cache", ["radix", "chunk"])
def test_a_bound_swa_pool_is_compared_pass_by_pass(swa_adder_0518, cache):
    """Not vacuous: eight 300-token prompts with 200 outputs each, window 128, an SWA pool of
    a quarter of 4,096 tokens, arriving two steps apart."""
    reqs = [(300, 200, a) for a in range(0, 16, 2)]
    assert compared_batches(swa_adder_0518, reqs, 16, 512, 4096, 128, 0.25, cache) >= 3
