"""The sglang-pre-35265 profile against SGLang 0.5.18's own code (the last release before PR 35265).

Skipped unless 0.5.18 is the installed SGLang (the ``sg0518`` fixture); CI runs this file
in its second venv, which has it. Three rules, each read from 0.5.18 itself:

* overlap planning: 0.5.18's Scheduler has no ``_reqs_finishing_inflight`` and its
  ``update_running_batch`` never returns None (no wait instead of a retraction), so
  every unfinished running request is planned. A reference loop in
  ``event_loop_overlap``'s order, reserving by the rules compiled from 0.5.18's
  ``dflash_info_v2.prepare_for_decode`` and ``eagle_utils.eagle_prepare_for_decode``,
  must give kvbench's plans, plan by plan;
* release: 0.5.18's ``release_kv_cache`` with ``ChunkCache.cache_finished_req`` (compiled
  from its source) frees kvbench's rows on 0.5.18's own allocator; the free list must
  come out in the order kvbench's unique-row rule leaves it, and the torch.unique calls
  (device syncs) must be kvbench's release_syncs;
* a pre-35265 engine trace conforms on 0.5.18 (allocator calls, reservations).
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
from collections import deque
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.cli import main
from harness.conform.check import _allocator, _check_call, _sglang_reserve
from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine, open_trace
from mini_engine.memory.config import MemoryConfig
from mini_engine.memory.manager import KVManager
from mini_engine.memory.trace.writer import TraceWriter
from mini_engine.config.profiles import PROFILES
from mini_engine.request import Request
from engine_plans import run_plans
from sglang_source import assigned, functions, methods, source

torch = pytest.importorskip("torch")  # SGLang's own dependency: without it no SGLang loads either
PROFILE = "sglang-pre-35265"


# -- overlap planning ------------------------------------------------------------------

@pytest.fixture(scope="module")
def rules_0518(sg0518):
    return SimpleNamespace(
        dflash=assigned("sglang.srt.speculative.dflash_info_v2", _dflash_owner(), "reserved_len"),
        eagle=assigned("sglang.srt.speculative.eagle_utils", "eagle_prepare_for_decode", "nxt"))


def _dflash_owner() -> str:
    """Class.method of dflash_info_v2 that holds prepare_for_decode."""
    for n in source("sglang.srt.speculative.dflash_info_v2").body:
        if isinstance(n, ast.ClassDef) and any(isinstance(m, ast.FunctionDef) and m.name == "prepare_for_decode"
                                               for m in n.body):
            return f"{n.name}.prepare_for_decode"
    raise AssertionError("sglang.srt.speculative.dflash_info_v2 no longer defines prepare_for_decode")


def test_0518_plans_every_running_request(sg0518):
    sched = next(n for n in source("sglang.srt.managers.scheduler").body
                 if isinstance(n, ast.ClassDef) and n.name == "Scheduler")
    names = {m.name for m in sched.body if isinstance(m, ast.FunctionDef)}
    assert "_reqs_finishing_inflight" not in names and "update_running_batch" in names
    update = next(m for m in sched.body if isinstance(m, ast.FunctionDef) and m.name == "update_running_batch")
    returns_none = [r for r in ast.walk(update) if isinstance(r, ast.Return)
                    and isinstance(r.value, ast.Constant) and r.value.value is None]
    assert returns_none == []  # no "wait for the in-flight frees" branch
    assert PROFILES[PROFILE].overlap_plan == "every-running"


class _Req:
    def __init__(self, rid: int, prompt: int, max_new: int):
        self.rid, self.output_ids, self.max_new = rid, [], max_new  # the prefill's token is in flight
        self.committed = self.allocated = prompt

    def finished(self) -> bool:
        return len(self.output_ids) >= self.max_new


def plans_0518(nxt, prompts, max_news, accept):
    """(committed, extent) per planned request, per plan: 0.5.18's overlap loop. update_running_batch
    drops finished requests only (filter_batch), so one its in-flight result finishes is planned.
    The prefill's result (each request's first token) is in flight at the first plan too: the
    loop forms the next batch before it processes the last one's, prefill or decode alike."""
    running = [_Req(i, p, n) for i, (p, n) in enumerate(zip(prompts, max_news))]
    queue, plans = deque([("prefill", list(running))]), []
    while running or queue:
        batch = [r for r in running if not r.finished()]
        for r in batch:
            r.allocated = nxt(r.allocated, r.committed)
        if batch:
            plans.append([(r.committed, r.allocated) for r in batch])
        if queue:  # process step N's result after step N+1 is planned
            kind, done = queue.popleft()
            for r in done:
                if kind == "prefill":
                    r.output_ids.append(0)  # the first token (its KV is written by the next forward)
                    continue
                if r.finished():
                    continue  # finished in flight: its result is skipped
                n = min(accept, r.max_new - len(r.output_ids))
                r.committed += n
                r.output_ids += [0] * n
        if batch:
            queue.append(("decode", batch))
        running = [r for r in running if not r.finished()]
    return plans


def kvbench_plans(opts, prompts, max_news, accept, ps):
    cfg = EngineConfig(page_size=ps, accept_len=accept, pool_tokens=1 << 16, max_context=1024,
                       chunked_prefill=8192, profile=PROFILE, **opts)
    plans, stats = run_plans(cfg, prompts, max_news)
    return plans, cfg, stats


def _rule(sg, rules, algo: str, ps: int, cfg):
    if algo == "dflash":
        block = cfg.block_size
        return lambda cur, c: rules.dflash({"cur_alloc_len": cur, "committed_len": c, "block_size": block})
    double = _sglang_reserve(sg, ps, "EAGLE", cfg.steps, cfg.topk, cfg.num_draft_tokens)  # 0.5.18's sizing
    return lambda cur, c: rules.eagle({"cur": cur, "r": SimpleNamespace(kv_committed_len=c),
                                       "double_alloc": double, "page_size": ps})


@settings(max_examples=30, deadline=None)
@given(prompts=st.lists(st.integers(1, 200), min_size=1, max_size=4), data=st.data(),
       ps=st.sampled_from([1, 16, 64]), algo=st.sampled_from(["dflash", "eagle"]))
def test_plans_equal_0518s_overlap_loop(sg0518, rules_0518, prompts, data, ps, algo):
    max_news = data.draw(st.lists(st.integers(1, 60), min_size=len(prompts), max_size=len(prompts)))
    opts = dict(spec="dflash", block_size=8) if algo == "dflash" else dict(spec="eagle", topk=1, steps=3)
    accept = data.draw(st.integers(1, 8 if algo == "dflash" else 4))
    mine, cfg, _ = kvbench_plans(opts, prompts, max_news, accept, ps)
    assert mine == plans_0518(_rule(sg0518, rules_0518, algo, ps, cfg), prompts, max_news, accept)


def test_worked_example_one_more_plan_than_0523(sg0518, rules_0518):
    # One DFLASH request, block 16, ps 16, prompt 37, 8 accepted, 18 outputs. 0.5.23 plans it
    # 3 times (test_overlap_vs_sglang); 0.5.18 once more, while its last result is in flight.
    mine, cfg, stats = kvbench_plans(dict(spec="dflash", block_size=16), [37], [18], 8, 16)
    theirs = plans_0518(_rule(sg0518, rules_0518, "dflash", 16, cfg), [37], [18], 8)
    assert mine == theirs == [[(37, 69)], [(37, 69)], [(45, 77)], [(53, 85)]]
    assert stats["overlap_extra_reservations"] == 1 and stats["overlap_extra_slots"] == 8


# -- release ---------------------------------------------------------------------------

class _CountingTorch:
    """torch with its unique counted: each is a device sync on a GPU."""

    def __init__(self):
        self.uniques = 0

    def __getattr__(self, name):
        return getattr(torch, name)

    def unique(self, *a, **kw):
        self.uniques += 1
        return torch.unique(*a, **kw)


@contextlib.contextmanager
def counting_uniques(module):
    counter, old = _CountingTorch(), module.torch
    module.torch = counter
    try:
        yield counter
    finally:
        module.torch = old


@pytest.fixture(scope="module")
def release_0518(sg0518):
    """0.5.18's release_kv_cache and ChunkCache.cache_finished_req, compiled from its source."""
    ns = {"torch": torch, "Req": object, "BasePrefixCache": object, "Optional": object,
          "get_spec": lambda: SimpleNamespace(speculative_algorithm="DFLASH"),
          "get_serving": lambda: SimpleNamespace(strip_thinking_cache=False),
          "ceil_align": lambda x, y: -(-x // y) * y, "HybridReqToTokenPool": type("Hybrid", (), {})}
    functions("sglang.srt.mem_cache.common", {"release_kv_cache", "_release_overallocated_kv_indices"}, ns)
    cache = methods("sglang.srt.mem_cache.chunk_cache", "ChunkCache", {"cache_finished_req"},
                    {"torch": torch, "Req": object})["cache_finished_req"]

    def release(alloc, rows, reqs):
        tree = SimpleNamespace(token_to_kv_pool_allocator=alloc, supports_mamba=lambda: False,
                               req_to_token_pool=SimpleNamespace(req_to_token=rows, free=lambda req: None))
        tree.cache_finished_req = lambda req, is_insert=True, **kw: cache(tree, req, is_insert, **kw)
        for row, (committed, extent) in reqs:
            req = SimpleNamespace(req_pool_idx=row, kv=SimpleNamespace(kv_allocated_len=extent),
                                  effective_kv_committed_len=lambda c=committed: c, cache_protected_len=0,
                                  skip_radix_cache_insert=False)
            ns["release_kv_cache"](req, tree)

    return release


@settings(max_examples=40, deadline=None)
@given(ps=st.sampled_from([1, 4, 16]), data=st.data(),
       lens=st.lists(st.tuples(st.integers(1, 70), st.integers(0, 70)), min_size=1, max_size=5),
       grouped=st.integers(0, 5))
def test_release_order_and_syncs_equal_0518s(sg0518, release_0518, ps, data, lens, grouped):
    """Requests of (extent, committed <= extent) released: the first ``grouped`` in one free
    group (a decode result's), the rest one by one."""
    lens = [(e, min(c, e)) for e, c in lens]
    width = 80
    # the chunk cache: 0.5.18's unique free is its ChunkCache's release (its radix tree frees by segment)
    mem = MemoryConfig(ps, 64 * 80 // ps + 8, len(lens), width, free_policy="unique-row",
                       prefix_cache="chunk")
    buf = io.StringIO()
    with TraceWriter.for_memory(buf, mem, {}) as trace:
        m = KVManager(mem, None, trace)
        states = []
        for i, (extent, committed) in enumerate(lens):
            s = m.admit(i)
            assert m.extend(s, extent)
            m.commit(s, committed)
            states.append(s)
        rows = torch.zeros((len(lens), width), dtype=torch.int64)
        for s in states:
            rows[s.row, :s.allocated] = torch.as_tensor(m.slots(s, 0, s.allocated))
        reqs = [(s.row, (int(s.committed), int(s.allocated))) for s in states]
        with m.free_group():
            for s in states[:grouped]:
                m.release(s)
        for s in states[grouped:]:
            m.release(s)
    alloc = _allocator(sg0518, mem.num_pages, ps, False)
    for line in buf.getvalue().splitlines()[1:]:
        rec = json.loads(line)
        if rec["op"] == "alloc_extend":
            assert _check_call(sg0518, alloc, rec, ps) is None
    with counting_uniques(sg0518.paged) as counter:
        alloc.free_group_begin()
        release_0518(alloc, rows, reqs[:grouped])
        alloc.free_group_end()
        release_0518(alloc, rows, reqs[grouped:])
    assert alloc.free_pages.tolist() == m.full.free_page_ids().tolist()
    assert counter.uniques == m.release_syncs


# -- conform ---------------------------------------------------------------------------

@pytest.mark.parametrize("opts", [dict(spec="dflash", block_size=8, accept_len=5),
                                  dict(spec="eagle", topk=4, steps=3)])
def test_pre_35265_trace_conforms_on_0518(sg0518, tmp_path, capsys, opts):
    import random

    path = tmp_path / "pre.jsonl"
    cfg = EngineConfig(page_size=16, pool_tokens=1 << 14, max_context=512, profile=PROFILE, **opts)
    rnd = random.Random(3)
    with open(path, "w") as fh:
        eng = Engine(cfg, trace=open_trace(cfg, fh))
        eng.submit([Request(i, list(range(1, rnd.randint(20, 200))), rnd.randint(8, 60)) for i in range(8)])
        assert eng.run().verdict == "ok"
    assert main(["conform", str(path)]) == 0, capsys.readouterr().out
    assert "conforms to sglang 0.5.18" in capsys.readouterr().out


def test_committed_pre_35265_example_conforms_on_0518(sg0518, capsys):
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "examples" / "trace_dflash_pre35265.jsonl"
    assert main(["conform", str(path)]) == 0, capsys.readouterr().out
