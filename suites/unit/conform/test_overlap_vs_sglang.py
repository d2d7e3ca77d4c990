"""kvbench's overlap scheduling against SGLang 0.5.23's own decisions.

(The last test: the chunk cache's eviction during chunked prefill, whose point moves
under overlap, from ``ScheduleBatch.maybe_evict_swa`` compiled the same way.)

The two rules overlap adds come from SGLang's code, compiled from the installed
source: which requests sit a plan out (``Scheduler._reqs_finishing_inflight`` with
``Req.next_output_finishes_by_length``, methods of modules too heavy to import on
a CPU box, so only those methods are compiled) and how much each plan reserves
(``allocation_sizing.page_aligned_decode_alloc_lens``, imported). A small reference
loop drives them in ``Scheduler.event_loop_overlap``'s order (plan step N+1 from
the host state, launch it, then process step N's result: commit the accepted run,
release a finished request) and must give, plan by plan, the lengths and extents
kvbench's engine plans, for random requests, acceptance and page sizes.
"""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mini_engine.config.engine_config import EngineConfig
from engine_plans import run_plans
from sglang_source import methods


@pytest.fixture(scope="module")
def sglang_rules(sg):  # sg: the installed SGLang, or a skip (a failure under KVBENCH_REQUIRE_SGLANG=1)
    req = methods("sglang.srt.managers.schedule_batch", "Req", {"next_output_finishes_by_length"}, {})
    sched = methods("sglang.srt.managers.scheduler", "Scheduler", {"_reqs_finishing_inflight"},
                     {"List": list, "ScheduleBatch": object, "Req": object})
    return SimpleNamespace(alloc_lens=sg.sizing.page_aligned_decode_alloc_lens,
                           finishes=req["next_output_finishes_by_length"],
                           finishing=sched["_reqs_finishing_inflight"])


class _Req:
    """The fields of SGLang's Req that the compiled rules read."""

    def __init__(self, rid: int, prompt: int, max_new: int, finishes):
        self.rid, self.beam_group = rid, None
        self.output_ids = [0]  # the prefill's token
        self.sampling_params = SimpleNamespace(max_new_tokens=max_new)
        self.kv = SimpleNamespace(kv_committed_len=prompt, kv_allocated_len=prompt)
        self._finishes = finishes

    def next_output_finishes_by_length(self) -> bool:
        return self._finishes(self)

    def finished(self) -> bool:
        return len(self.output_ids) >= self.sampling_params.max_new_tokens


def sglang_overlap_plans(rules, prompts, max_news, accepts, reserve, ps):
    """(committed, extent) of every request each plan allocates for, SGLang's overlap loop."""
    running = [_Req(i, p, n, rules.finishes) for i, (p, n) in enumerate(zip(prompts, max_news))]
    running = [r for r in running if not r.finished()]
    scheduler = SimpleNamespace(enable_skip_finishing_decode=True, result_queue=deque())
    plans, step = [], 0
    while running or scheduler.result_queue:
        # plan step N+1 (get_next_batch_to_run -> update_running_batch -> prepare_for_decode)
        batch = SimpleNamespace(reqs=[r for r in running if not r.finished()])
        out = set(map(id, rules.finishing(scheduler, batch)))
        batch.reqs = [r for r in batch.reqs if id(r) not in out]
        if batch.reqs:
            cur, nxt, _ = rules.alloc_lens(batch.reqs, reserve=reserve, page_size=ps)
            for r, n in zip(batch.reqs, nxt):
                r.kv.kv_allocated_len = n
            plans.append([(r.kv.kv_committed_len, r.kv.kv_allocated_len) for r in batch.reqs])
        launched = (SimpleNamespace(reqs=list(batch.reqs)), step)
        # process step N's result (one result in flight at a time)
        if scheduler.result_queue:
            done, at = scheduler.result_queue.popleft()
            for r in done.reqs:
                if r.finished():
                    continue  # finished in flight: this result is skipped
                n = min(accepts(r.rid, at), r.sampling_params.max_new_tokens - len(r.output_ids))
                r.kv.kv_committed_len += n
                r.output_ids += [0] * n
        if batch.reqs:
            scheduler.result_queue.append(launched)
        running = [r for r in running if not r.finished()]
        step += 1
    return plans


def kvbench_plans(spec_opts, prompts, max_news, accept_len, ps):
    cfg = EngineConfig(page_size=ps, accept_len=accept_len, pool_tokens=1 << 16, max_context=1024,
                       chunked_prefill=8192, **spec_opts)
    plans, _ = run_plans(cfg, prompts, max_news)
    return plans, cfg.step_reserve


@settings(max_examples=40, deadline=None)
@given(prompts=st.lists(st.integers(1, 200), min_size=1, max_size=4), data=st.data(),
       ps=st.sampled_from([1, 16, 64]), algo=st.sampled_from(["dflash", "eagle"]))
def test_plans_equal_sglangs_overlap_loop(sglang_rules, prompts, data, ps, algo):
    max_news = data.draw(st.lists(st.integers(1, 60), min_size=len(prompts), max_size=len(prompts)))
    opts = dict(spec="dflash", block_size=8) if algo == "dflash" else dict(spec="eagle", topk=1, steps=3)
    most = 8 if algo == "dflash" else 4
    accept = data.draw(st.integers(1, most))
    mine, reserve = kvbench_plans(opts, prompts, max_news, accept, ps)
    theirs = sglang_overlap_plans(sglang_rules, prompts, max_news, lambda rid, step: accept, reserve, ps)
    assert mine == theirs


def test_worked_example_reads_the_same_in_sglang(sglang_rules):
    # test_overlap.py: one DFLASH request, block 16 (reserve 32), ps 16, prompt 37, 8 accepted, 20 outputs.
    plans = sglang_overlap_plans(sglang_rules, [37], [20], lambda rid, step: 8, 32, 16)
    assert plans == [[(37, 80)], [(37, 80)], [(45, 80)], [(53, 96)]]
    assert sglang_overlap_plans(sglang_rules, [37], [18], lambda rid, step: 8, 32, 16) == \
        [[(37, 80)], [(37, 80)], [(45, 80)]]


@pytest.fixture(scope="module")
def sglang_extend_evict(sg):
    """SGLang's ScheduleBatch.maybe_evict_swa on an extend batch with the chunk cache: the
    position it evicts below for one chunked request (0: none)."""
    from sglang.srt.environ import envs

    state = {}
    ns = methods("sglang.srt.managers.schedule_batch", "ScheduleBatch", {"maybe_evict_swa", "_swa_eviction_trigger"},
                  {"envs": envs, "_is_hip": False,
                   "get_schedule": lambda: SimpleNamespace(chunked_prefill_size=state["cps"])})

    def evict(chunk: int, prefilled: int, cps: int, overlap: bool, window: int = 32) -> int:
        state["cps"] = cps
        seen = []
        req = SimpleNamespace(extend_batch_idx=chunk, decode_batch_idx=0)
        batch = SimpleNamespace(
            tree_cache=SimpleNamespace(supports_swa=lambda: True, swa_retain_window=window,
                                       supports_auxiliary_swa=lambda: False, supports_prefix_sharing=lambda: False),
            token_to_kv_pool_allocator=SimpleNamespace(free_group_begin=lambda: None, free_group_end=lambda: None),
            forward_mode=SimpleNamespace(is_decode=lambda: False, is_extend=lambda: True),
            reqs=[req], prefix_lens=[prefilled], enable_overlap=overlap,
            _evict_swa=lambda r, pre_len, **kw: seen.append(pre_len))
        batch._swa_eviction_trigger = lambda *a: ns["_swa_eviction_trigger"](batch, *a)
        ns["maybe_evict_swa"](batch)
        return seen[0] if seen else 0

    return evict


@given(chunk=st.integers(0, 12), size=st.integers(1, 300), cps=st.integers(1, 300), overlap=st.booleans())
def test_chunked_prefill_eviction_point_equals_sglangs(sglang_extend_evict, chunk, size, cps, overlap):
    from mini_engine.scheduler.scheduler import Scheduler

    prefilled = chunk * min(size, cps)  # chunk k starts after k chunks of at most cps
    sched = SimpleNamespace(profile=SimpleNamespace(overlap=overlap),
                            extend_batches={0: chunk}, cfg=SimpleNamespace(chunked_prefill=cps))
    mine = Scheduler._chunk_final_len(sched, SimpleNamespace(rid=0, prefilled=prefilled))
    # a negative point (chunks smaller than chunked_prefill_size) evicts nothing in either
    assert mine == max(0, sglang_extend_evict(chunk, prefilled, cps, overlap))
