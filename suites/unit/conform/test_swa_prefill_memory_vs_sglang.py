"""The SWA memory side of admission (mini_engine/scheduler/prefill_adder_swa.py) against SGLang 0.5.23's own
``PrefillAdder`` with its ``SWAPrefillBudget``.

As test_prefill_memory_vs_sglang.py does for full-attention pools: an engine with SWA
layers runs under ``admission = "sglang"`` with pools small enough for memory to bind;
before every admission its state goes to SGLang's adder (compiled from source, its
allocator a stand-in of ``SWATokenToKVPoolAllocator`` so the adder takes its hybrid-SWA
branches): the full pool's free tokens and the tree's evictable full tokens, the SWA
pool's free tokens and the tree's evictable SWA tokens, the pool's SWA size, the window,
the decoding requests, the continuing chunked request and the waiting queue. The
requests SGLang admits, each chunk's start and end, and the budget's offsets (total,
current, SWA) and ``rem_input_tokens`` must equal kvbench's. Prompts are distinct, so
no match locks anything (a pass where a retracted request matches its own chunks is
not compared: the stand-in tree matches nothing). A parked chunked request (the SWA pool too short for it) is
admitted by neither; a pass where kvbench's empty engine tries its head request anyway
is not compared (SGLang would stall there: docs/conform.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import logging
import typing
from types import SimpleNamespace

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.scheduler.prefill_adder_swa import SWAPrefillMemory
from mini_engine.scheduler.prefix_match import prefix_match
from mini_engine.request import Request
from sglang_source import classes, functions
from suites.unit.conform.test_prefill_memory_vs_sglang import run_adder


class _SWAAlloc(SimpleNamespace):
    """Stands for SWATokenToKVPoolAllocator: the adder's isinstance test names this class."""


class _Dummy:
    pass


@pytest.fixture(scope="module")
def swa_adder(sg):  # sg: the installed SGLang, or a skip
    budget_ns = {"Optional": typing.Optional, "is_swa_req_ring": lambda allocator: False}
    functions("sglang.srt.mem_cache.prefill_budget", {"estimate_swa_kv_tokens"}, budget_ns)
    classes("sglang.srt.mem_cache.prefill_budget", {"PrefillBudget", "SWAPrefillBudget"}, budget_ns)
    ns = {
        "Enum": enum.Enum, "auto": enum.auto, "dataclass": dataclasses.dataclass,
        "contextmanager": contextlib.contextmanager, "nullcontext": contextlib.nullcontext,
        "logger": logging.getLogger("sglang-adder"), "CLIP_MAX_NEW_TOKENS": 4096,
        "IGNORE_EOS_RESERVE_TOKENS": 1, "_IS_HIP": False, "PREFILL_TILE_BUDGET": 0,
        "mamba_prefill_chunk_grid": lambda: 1, "_use_exact_chunk_fill": lambda: False,
        "page_interleave_shard_size": lambda allocator: 1,
        "get_exec": lambda: SimpleNamespace(features=SimpleNamespace(enable_encoder_swa_bounded_replay=False)),
        "get_schedule": lambda: SimpleNamespace(schedule_policy="fcfs"),
        "SWATokenToKVPoolAllocator": _SWAAlloc,
    }
    for name in ("DeepSeekV4HiSparseTokenToKVPoolAllocator", "UnifiedMambaTokenToKVPoolAllocator",
                 "UnifiedMambaSWATokenToKVPoolAllocator", "UnifiedRadixCache"):
        ns[name] = _Dummy
    classes("sglang.srt.managers.schedule_policy", {"AddReqResult", "_PrefillAdmission", "PrefillAdder"}, ns)
    return SimpleNamespace(budget=budget_ns["SWAPrefillBudget"], adder=ns["PrefillAdder"],
                           result=ns["AddReqResult"], estimate=budget_ns["estimate_swa_kv_tokens"])


@dataclasses.dataclass
class Pools:
    """What SGLang's allocator and tree report, in tokens."""
    full_free: int
    swa_free: int
    swa_size: int
    window: int
    full_evictable: int = 0
    swa_evictable: int = 0


def sglang_admission(sgc, ps: int, chunk: int, cache: str, pools: Pools, decoding: list[Request],
                     chunked: Request | None, waiting: list[Request], ratio: float = 0.7):
    """SGLang's batch for this state: [(rid, start, end)] and (total, current, swa, rem_input)."""
    tree = SimpleNamespace(disable=cache == "chunk", supports_mamba=lambda: False,
                           supports_prefix_sharing=lambda: cache == "radix",
                           evictable_size=lambda: pools.full_evictable,
                           full_evictable_size=lambda: pools.full_evictable,
                           swa_evictable_size=lambda: pools.swa_evictable, sliding_window_size=pools.window,
                           lock=lambda node: None, unlock=lambda lock: None, buffer_pipeline=None,
                           finish_storage_prefetch_admission=lambda *a, **k: None,
                           discard_storage_prefetch_accounting=lambda *a: None)
    alloc = _SWAAlloc(page_size=ps, full_available_size=lambda: pools.full_free,
                      swa_available_size=lambda: pools.swa_free, size_swa=pools.swa_size,
                      request_slot_reserve=lambda **k: 0)
    adder = run_adder(sgc, ps, chunk, tree, alloc, decoding, chunked, waiting, ratio)
    assert adder.is_hybrid_swa
    b = adder.memory_budget
    return ([(q.rid, q.prefix_len, q.extend_end) for q in adder.can_run_list],
            (b.total_offset, b.current_offset, b.swa_offset, adder.rem_input_tokens))


def compared_batches(sgc, reqs, ps, chunk, pool, window, ratio, cache, *, profile: str | None = None,
                     admission=sglang_admission) -> int:
    """Run the engine; check every admission against SGLang's (``admission``: the release's
    adder for a state, sglang_admission's signature). Returns how many were compared."""
    cfg = EngineConfig(spec="none", page_size=ps, pool_tokens=pool, chunked_prefill=chunk, prefix_cache=cache,
                       max_running=1024, max_context=8192, admission="sglang", window=window,
                       layer_pattern="1:1", swa_ratio=ratio, **({"profile": profile} if profile else {}))
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
        theirs, budget = admission(sgc, ps, chunk, cache, pools, decoding, chunked, waiting, ratio_now)
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
# The chunk cache's window eviction frees SWA pages only after SGLang's pass (alloc_for_extend):
# with 48 SWA tokens free the last chunk of request 3 reserves 33, and request 1 must wait.
@example(reqs=[(1, 1, 0), (1, 1, 1), (33, 2, 0), (97, 1, 0)], ps=16, chunk_pages=2, pool_pages=24, window=32,
         ratio=0.25, cache="chunk")
def test_swa_admissions_equal_sglangs(swa_adder, reqs, ps, chunk_pages, pool_pages, window, ratio, cache):
    chunk = chunk_pages * max(ps, 16)
    pool = pool_pages * max(ps, 32)
    reqs = [(n, o, a) for n, o, a in reqs if n + o + 2 * max(ps, 16) < pool * ratio] or [(10, 10, 0)]
    compared_batches(swa_adder, reqs, ps, chunk, pool, window, ratio, cache)


def test_estimate_is_sglangs(swa_adder):
    from mini_engine.scheduler.prefill_adder_swa import estimate_swa_tokens

    for extend in (0, 1, 100, 255, 256, 257, 1000, 5000):
        for max_new in (0, 1, 300):
            for window, ps, limit in ((256, 16, None), (256, 16, 512), (32, 1, 64), (4096, 64, 128)):
                assert estimate_swa_tokens(extend, max_new, window=window, page_size=ps, chunk_limit=limit) == \
                    swa_adder.estimate(extend, max_new, sliding_window_size=window, page_size=ps,
                                       allocation_limit=limit)


def test_worked_example(swa_adder):
    # The module docstring's: ps 16, window 256, SWA pool of 2048 with 1024 free: the first of
    # two requests (1000 prompt, 100 outputs) needs 1024 and waits; with 1100 free it joins alone.
    reqs = [Request(rid=i, prompt=list(range(i * 10000, i * 10000 + 1000)), max_new_tokens=100) for i in (0, 1)]
    for free, joined in ((1024, []), (1100, [(0, 0, 1000)])):
        pools = Pools(1 << 20, free, 2048, 256)
        batch, budget = sglang_admission(swa_adder, 16, 8192, "radix", pools, [], None, reqs)
        assert batch == joined
    assert budget[2] == 1024
