"""kvbench's chunked-prefill admission against SGLang 0.5.23's own ``PrefillAdder``.

schedule_policy.py and prefill_budget.py import the GPU stack at load time, so the
classes (``PrefillAdder``, ``AddReqResult``, ``_PrefillAdmission``, ``PrefillBudget``)
are compiled from the installed source and driven the way ``Scheduler.
_get_new_batch_prefill_raw`` drives them: a fresh adder per prefill batch, the
chunked request first (``add_chunked_req``), then the waiting queue (``add_one_req``)
until the budget says stop. The pool is large, so only the chunk budget decides; the
memory budget (``rem_total_tokens``) is compared in test_prefill_memory_vs_sglang.py.
The property compares every prefill batch: which requests, and where each chunk starts
and ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import logging
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.request import Request
from sglang_source import classes

BIG = 1 << 17  # pool tokens: the memory budget never binds (30 prompts of at most 700 tokens)


class _Dummy:  # allocator classes the adder's isinstance checks name; never instantiated
    pass


@pytest.fixture(scope="module")
def adder_classes(sg):  # sg: the installed SGLang, or a skip (a failure under KVBENCH_REQUIRE_SGLANG=1)
    budget_ns = classes("sglang.srt.mem_cache.prefill_budget", {"PrefillBudget"},
                        {"Optional": object, "is_swa_req_ring": lambda allocator: False})
    ns = {
        "Enum": enum.Enum, "auto": enum.auto, "dataclass": dataclasses.dataclass,
        "contextmanager": contextlib.contextmanager, "nullcontext": contextlib.nullcontext,
        "logger": logging.getLogger("sglang-adder"), "CLIP_MAX_NEW_TOKENS": 4096,
        "IGNORE_EOS_RESERVE_TOKENS": 1,  # the module's constants (their environment defaults)
        "_IS_HIP": False, "PREFILL_TILE_BUDGET": 0,
        "mamba_prefill_chunk_grid": lambda: 1, "_use_exact_chunk_fill": lambda: False,
        "page_interleave_shard_size": lambda allocator: 1,
        "get_exec": lambda: SimpleNamespace(features=SimpleNamespace(enable_encoder_swa_bounded_replay=False)),
        "get_schedule": lambda: SimpleNamespace(schedule_policy="fcfs"),
    }
    for name in ("SWATokenToKVPoolAllocator", "DeepSeekV4HiSparseTokenToKVPoolAllocator",
                 "UnifiedMambaTokenToKVPoolAllocator", "UnifiedMambaSWATokenToKVPoolAllocator",
                 "UnifiedRadixCache"):
        ns[name] = _Dummy
    classes("sglang.srt.managers.schedule_policy", {"AddReqResult", "_PrefillAdmission", "PrefillAdder"}, ns)
    return SimpleNamespace(budget=budget_ns["PrefillBudget"], adder=ns["PrefillAdder"], result=ns["AddReqResult"])


class _Req:
    """The fields of SGLang's Req that the adder reads, for a request without a prefix match."""

    def __init__(self, rid: int, prompt: int, out: int):
        self.rid = rid
        self.origin_input_ids = self.full_untruncated_fill_ids = list(range(prompt))
        self.output_ids: list[int] = []
        self.sampling_params = SimpleNamespace(max_new_tokens=out, ignore_eos=True)  # fixed length, as kvbench's
        self.prefix_len = self.extend_end = 0
        self.kv = SimpleNamespace(holds_mamba=False, req_pool_idx=None, cache_protected_len=0)
        self.last_node = self.best_match_node = None
        self.host_hit_length = self.swa_host_hit_length = self.auxiliary_swa_host_hit_length = 0
        self.storage_hit_length = 0
        self.retracted_stain = False
        self.cache_request_handle = None

    @property
    def extend_len(self) -> int:
        return self.extend_end - self.prefix_len

    def needs_host_load_back(self) -> bool:
        return False

    def fulfilled_storage_hit_len(self, prefix_len: int) -> int:
        return 0


def sglang_batches(sgc, prompts: list[int], ps: int, chunk: int, cache: str) -> list[list[tuple[int, int, int]]]:
    """Every prefill batch SGLang forms for the queue: [(rid, start, end)] per batch."""
    tree = SimpleNamespace(disable=cache == "chunk", supports_mamba=lambda: False,
                           supports_prefix_sharing=lambda: cache == "radix", evictable_size=lambda: 0,
                           lock=lambda node: None, unlock=lambda lock: None, buffer_pipeline=None,
                           finish_storage_prefetch_admission=lambda *a, **k: None,
                           discard_storage_prefetch_accounting=lambda *a: None)
    alloc = SimpleNamespace(page_size=ps, available_size=lambda: BIG, request_slot_reserve=lambda **k: 0)
    alloc.create_prefill_budget = lambda t, num_mixed_decode_tokens=0: sgc.budget(
        alloc, t, num_mixed_decode_tokens=num_mixed_decode_tokens)
    queue = [_Req(i, n, 4) for i, n in enumerate(prompts)]
    chunked = None
    batches = []
    while queue or chunked is not None:
        adder = sgc.adder(ps, tree, alloc, None, 0.7, 16384, chunk)
        if chunked is not None:
            chunked.prefix_len = chunked.extend_end  # the previous chunk is in the row now
            chunked = adder.add_chunked_req(chunked)
        for req in queue:
            if adder.budget_state() == sgc.result.OTHER:
                break
            if adder.add_one_req(req, has_chunked_req=chunked is not None,
                                 truncation_align_size=None) != sgc.result.CONTINUE:
                break
        admitted = adder.can_run_list
        assert admitted, "SGLang formed an empty batch"
        queue = [r for r in queue if r not in admitted]
        if adder.new_chunked_req is not None:
            chunked = adder.new_chunked_req
        batches.append([(r.rid, r.prefix_len, r.extend_end) for r in admitted])
    return batches


def kvbench_batches(prompts: list[int], ps: int, chunk: int, cache: str) -> list[list[tuple[int, int, int]]]:
    cfg = EngineConfig(spec="none", page_size=ps, pool_tokens=BIG, chunked_prefill=chunk, prefix_cache=cache,
                       max_running=1024, max_context=4096)
    engine = Engine(cfg)
    # Prompts of distinct tokens: SGLang's side here matches no prefix (its tree is a stub), so
    # kvbench's radix tree must find none either; the budget rule is what is compared.
    engine.submit([Request(rid=i, prompt=list(range(i * 1000, i * 1000 + n)), max_new_tokens=4)
                   for i, n in enumerate(prompts)])
    batches = []
    admit = engine.sched.admit

    def recording_admit():
        chunks, pd = admit()
        if chunks:
            batches.append([(c.req.rid, c.start, c.end) for c in chunks])
        return chunks, pd

    engine.sched.admit = recording_admit
    while engine.sched.waiting or engine.sched.future or any(r.prefilling for r in engine.sched.running):
        engine.tick()
    return batches


@settings(max_examples=60, deadline=None)
@given(prompts=st.lists(st.integers(1, 700), min_size=1, max_size=30),
       ps=st.sampled_from([1, 2, 16, 64]), chunk_pages=st.integers(1, 40),
       cache=st.sampled_from(["radix", "chunk"]))
def test_prefill_batches_equal_sglangs(adder_classes, prompts, ps, chunk_pages, cache):
    chunk = chunk_pages * max(ps, 8)  # SGLang asserts chunked_prefill_size % page_size == 0
    assert kvbench_batches(prompts, ps, chunk, cache) == sglang_batches(adder_classes, prompts, ps, chunk, cache)


@pytest.mark.parametrize("cache", ["radix", "chunk"])
def test_twenty_short_prompts_fill_eleven_requests(adder_classes, cache):
    # Ten requests cost 48 each (480 of 512); the eleventh is cut at 32: 402 tokens.
    for batches in (kvbench_batches([37] * 20, 16, 512, cache), sglang_batches(adder_classes, [37] * 20, 16, 512, cache)):
        first = batches[0]
        assert len(first) == 11 and sum(e - s for _, s, e in first) == 402 and first[-1] == (10, 0, 32)


def test_uniform_workload_first_batch(adder_classes):
    # kvbench's default uniform workload (100..1024 tokens, seed 0), chunk 8192: the first
    # batch charges whole pages, so it holds fewer tokens as the page grows.
    from harness.core.workloads import WorkloadConfig, make_requests

    prompts = [len(r.prompt) for r in make_requests(WorkloadConfig(num_requests=24), 0)]
    for ps, tokens, cut in ((16, 8108, 864), (64, 7628, 384)):
        for batches in (kvbench_batches(prompts, ps, 8192, "radix"), sglang_batches(adder_classes, prompts, ps, 8192, "radix")):
            first = batches[0]
            assert len(first) == 18 and sum(e - s for _, s, e in first) == tokens and first[-1][2] == cut
