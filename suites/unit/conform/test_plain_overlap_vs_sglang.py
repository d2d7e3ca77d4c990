"""Overlapped plain decode against SGLang 0.5.23's loop order and its own allocator.

A reference loop runs ``Scheduler.event_loop_overlap``'s order for plain decode: plan
step N+1 (the running requests, less those ``Scheduler._reqs_finishing_inflight`` with
``Req.next_output_finishes_by_length`` leaves out, both compiled from the installed
source), allocate it with SGLang's ``PagedTokenToKVPoolAllocator.alloc_decode``
(``alloc_for_decode`` counts the token committed there), then process step N's result
(``process_batch_result_decode``: one output each; a request at its limit is released,
its pages freed in that result's free group). The slots every allocation hands out,
request by request, must be the ones kvbench's overlapped engine records. The prefill is
one ``alloc_extend`` for the batch. Requests decode at least one token past the prefill
(a request whose only output is the prefill's is outside this loop: kvbench lands a
prefill's result at once).
"""

from __future__ import annotations

import io
import json
from collections import deque
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine, open_trace
from mini_engine.request import Request
from sglang_source import methods


@pytest.fixture(scope="module")
def rules(sg):  # sg: the installed SGLang, or a skip (a failure under KVBENCH_REQUIRE_SGLANG=1)
    req = methods("sglang.srt.managers.schedule_batch", "Req", {"next_output_finishes_by_length"}, {})
    sched = methods("sglang.srt.managers.scheduler", "Scheduler", {"_reqs_finishing_inflight"},
                     {"List": list, "ScheduleBatch": object, "Req": object})
    return SimpleNamespace(sg=sg, finishes=req["next_output_finishes_by_length"],
                           finishing=sched["_reqs_finishing_inflight"])


class _Req:
    def __init__(self, rid: int, prompt: int, max_new: int, rules):
        self.rid, self.beam_group, self._rules = rid, None, rules
        self.output_ids: list[int] = []
        self.sampling_params = SimpleNamespace(max_new_tokens=max_new)
        self.committed = prompt
        self.slots: list[int] = []

    def next_output_finishes_by_length(self) -> bool:
        return self._rules.finishes(self)

    def finished(self) -> bool:
        return len(self.output_ids) >= self.sampling_params.max_new_tokens


def sglang_calls(rules, prompts, max_news, ps, num_pages):
    """(rids, slots per request) of every allocation, in event_loop_overlap's order."""
    torch = rules.sg.torch
    alloc = rules.sg.paged.PagedTokenToKVPoolAllocator(num_pages * ps, ps, torch.int64, "cpu", None, False)
    reqs = [_Req(i, p, n, rules) for i, (p, n) in enumerate(zip(prompts, max_news))]
    lens = torch.tensor(prompts, dtype=torch.int64)
    zero = torch.zeros(len(reqs), dtype=torch.int64)
    out = alloc.alloc_extend(zero, zero.clone(), lens, lens.clone(), torch.full((len(reqs),), -1), sum(prompts))
    calls = []
    for r, s in zip(reqs, torch.split(out, prompts)):
        r.slots = s.tolist()
    calls.append((tuple(r.rid for r in reqs), [list(r.slots) for r in reqs]))
    for r in reqs:
        r.output_ids.append(0)  # the prefill's token (kvbench lands a prefill's result at once)
    running = [r for r in reqs if not r.finished()]
    scheduler = SimpleNamespace(enable_skip_finishing_decode=True, result_queue=deque())
    while running or scheduler.result_queue:
        batch = SimpleNamespace(reqs=[r for r in running if not r.finished()])
        out_ids = set(map(id, rules.finishing(scheduler, batch)))
        batch.reqs = [r for r in batch.reqs if id(r) not in out_ids]
        if batch.reqs:  # prepare_for_decode -> alloc_for_decode: one slot each, committed there
            seq = torch.tensor([r.committed + 1 for r in batch.reqs], dtype=torch.int64)
            last = torch.tensor([r.slots[r.committed - 1] for r in batch.reqs], dtype=torch.int64)
            got = alloc.alloc_decode(seq, seq.clone(), last).tolist()
            for r, s in zip(batch.reqs, got):
                r.slots.append(s)
                r.committed += 1
            calls.append((tuple(r.rid for r in batch.reqs), [[s] for s in got]))
        if scheduler.result_queue:  # process_batch_result_decode of the step in flight
            done, _ = scheduler.result_queue.popleft()
            alloc.free_group_begin()
            for r in done.reqs:
                if r.finished():
                    continue
                r.output_ids.append(0)
                if r.finished():  # release_kv_cache: the row's pages, in position order
                    pages = list(dict.fromkeys(s // ps for s in r.slots))
                    alloc.free_page_ids(torch.tensor(pages, dtype=torch.int64))
            alloc.free_group_end()
        if batch.reqs:
            scheduler.result_queue.append((SimpleNamespace(reqs=list(batch.reqs)), None))  # (batch, result)
        running = [r for r in running if not r.finished()]
    return calls


def kvbench_calls(prompts, max_news, ps, num_pages):
    # The chunk cache: SGLang's loop here releases a finished row's pages (no tree keeps them).
    cfg = EngineConfig(page_size=ps, pool_tokens=num_pages * ps, max_context=512, chunked_prefill=8192,
                       max_running=len(prompts), prefix_cache="chunk")
    buf = io.StringIO()
    with open_trace(cfg, buf) as trace:
        res = Engine(cfg, trace=trace).run([Request(i, list(range(1, p + 1)), n)
                                            for i, (p, n) in enumerate(zip(prompts, max_news))])
    assert res.verdict == "ok" and res.stats["retractions"] == 0
    calls, rids = [], None
    for rec in map(json.loads, buf.getvalue().splitlines()[1:]):
        if rec["op"] == "prepare":
            rids = tuple(q["rid"] for q in rec["reqs"])
        elif rec["op"] == "alloc_extend":
            calls.append((rids if rec.get("decode") else tuple(range(len(rec["out"]))), rec["out"]))
    return calls


@settings(max_examples=30, deadline=None)
@given(prompts=st.lists(st.integers(1, 40), min_size=1, max_size=4), data=st.data(), ps=st.sampled_from([4, 16]))
def test_overlapped_plain_decode_allocates_as_sglangs_loop(rules, prompts, data, ps):
    max_news = data.draw(st.lists(st.integers(2, 24), min_size=len(prompts), max_size=len(prompts)))
    # Room for admission to take every request at once; freed pages go in front of the free
    # list (LIFO), so when a release lands decides the next page ids whatever the pool's size.
    num_pages = 4 * sum(-(-(p + n) // ps) for p, n in zip(prompts, max_news)) + 8
    assert kvbench_calls(prompts, max_news, ps, num_pages) == sglang_calls(rules, prompts, max_news, ps, num_pages)


def test_the_worked_case_of_the_engine_suite(rules):
    """suites/unit/engine/test_plain_overlap.py's case: page 5 (slot 20) for request 1's
    position 8, where the synchronous loop gives page 1 (slot 4)."""
    calls = sglang_calls(rules, [4, 7], [2, 4], 4, 16)
    assert calls[2] == ((1,), [[20]])
    assert kvbench_calls([4, 7], [2, 4], 4, 16) == calls
