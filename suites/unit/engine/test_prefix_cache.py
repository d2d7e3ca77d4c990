"""The radix prefix cache in the engine (mini_engine/memory/tree/prefix.py), on worked numbers.

Issue 19's example: 16 requests x (512 shared + 64 own tokens), 128 outputs each, page
size 16, full attention, a 4096-page pool. SGLang 0.5.23 with its default radix cache
peaks at 224 pages off the free list (32 shared + 16 x (4 own prompt pages + 8 output
pages)) and keeps 208 pages evictable in the tree after the drain (32 shared + 16 x 11:
the page-aligned 576 + 127 computed tokens; the 16th token of each last page is never
computed, so that page is freed). ``--disable-radix-cache`` (kvbench's chunk cache)
peaks at 16 x 44 = 704 and frees everything. Assumptions where the issue leaves them
open: the requests arrive together (or one per step: same figures), chunked prefill
8192, max_running 256, every request runs its 128 outputs, and SGLang's synchronous loop
(--disable-overlap-schedule): under its default overlap loop a prefill's result, which
checkpoints the shared prompt, lands after the next batch is admitted
(test_prefill_overlap.py), so a request admitted in the step after the first matches
nothing.
"""

from __future__ import annotations

import numpy as np
import pytest

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.memory.tree.swa_prefix import SWAPrefixCache
from mini_engine.request import Request

PS = 16


def shared_prefix_requests(n=16, shared=512, own=64, out=128, stagger=0, seed=0):
    rng = np.random.default_rng(seed)
    common = rng.integers(1, 30000, shared).tolist()
    return [Request(rid=i, prompt=common + rng.integers(1, 30000, own).tolist(), max_new_tokens=out,
                    arrival_step=i * stagger) for i in range(n)]


def run(prefix_cache: str, **kw):
    kw.setdefault("overlap", False)
    cfg = EngineConfig(page_size=PS, pool_tokens=4096 * PS, max_context=1024, prefix_cache=prefix_cache,
                       audit="raise", **{k: v for k, v in kw.items() if k != "stagger"})
    engine = Engine(cfg)
    res = engine.run(shared_prefix_requests(stagger=kw.get("stagger", 0)))
    assert res.verdict == "ok", res.error
    return engine, res.stats


@pytest.mark.parametrize("stagger", [0, 1])
def test_radix_peaks_at_224_pages_and_keeps_208_evictable(stagger):
    engine, s = run("radix", stagger=stagger)
    assert s["peak_pages_used"] == 224
    assert s["tree_pages"] == s["tree_evictable_pages"] == 208
    assert engine.manager.num_free_pages == 4096 - 208
    assert s["leaked_pages"] == 0 and s["violations"] == 0
    assert s["prefix_hit_tokens"] >= 512  # at least one request reused the shared prompt


def test_staggered_arrivals_reuse_the_shared_prompt():
    _, s = run("radix", stagger=1)
    # Request 0 computes all 576 tokens; each later one matches the 512 shared tokens.
    assert s["prefix_hit_tokens"] == 15 * 512
    assert s["prefill_tokens"] == 576 + 15 * 64
    assert s["prefix_hit_rate"] == pytest.approx(15 * 512 / (16 * 576))


def test_under_overlap_the_second_arrival_misses_the_first_ones_prompt():
    # Request 1 is admitted in step 1, before request 0's prefill result checkpoints the
    # shared prompt (event_loop_overlap); requests 2-15 find it in the tree.
    _, s = run("radix", stagger=1, overlap=True)
    assert s["prefix_hit_tokens"] == 14 * 512
    assert s["prefill_tokens"] == 2 * 576 + 14 * 64


def test_chunk_cache_peaks_at_704_and_frees_everything():
    engine, s = run("chunk")
    assert s["peak_pages_used"] == s["peak_pages_held"] == 704
    assert s["tree_pages"] == 0 and s["prefix_hit_tokens"] == 0
    assert engine.manager.num_free_pages == 4096


def test_a_small_pool_evicts_from_the_tree_instead_of_failing():
    # 60 pages: one request's 44 plus the shared 32 do not fit beside a finished request's
    # 43 tree pages; the allocation evicts unlocked leaves first.
    engine, s = run("radix", stagger=40, max_running=1)
    assert s["finished_requests"] == 16 and s["violations"] == 0
    small = EngineConfig(page_size=PS, pool_tokens=60 * PS, max_context=1024, audit="raise", max_running=1)
    e = Engine(small)
    res = e.run(shared_prefix_requests(n=4, stagger=0))
    assert res.verdict == "ok", res.error
    assert res.stats["tree_evicted_pages"] > 0
    assert res.stats["leaked_pages"] == 0
    assert e.manager.num_free_pages + e.manager.tree_pages == 60


def test_pd_decode_side_runs_without_a_tree_unless_pd_radix():
    for pd_radix, tree in ((False, False), (True, True)):
        cfg = EngineConfig(page_size=PS, pool_tokens=512 * PS, max_context=1024, audit="raise", pd_radix=pd_radix)
        e = Engine(cfg)
        reqs = [Request(rid=i, prompt=list(range(1, 101)), max_new_tokens=20, fill_len=100) for i in range(3)]
        res = e.run(reqs)
        assert res.verdict == "ok", res.error
        assert (e.manager.prefix is not None) is tree
        assert e.manager.num_free_pages + e.manager.tree_pages == 512


def test_swa_models_run_the_swa_aware_tree():
    # SGLang 0.5.23 runs UnifiedRadixCache with the SWA component for a hybrid model:
    # the shared prompt is matched, and the finished requests' pages stay in the tree, in
    # both pools (memory/tree/swa_prefix.py); nothing leaks.
    cfg = EngineConfig(page_size=PS, pool_tokens=2048 * PS, max_context=1024, window=128, layer_pattern="1:1",
                       audit="raise")
    e = Engine(cfg)
    assert isinstance(e.manager.prefix, SWAPrefixCache)
    res = e.run(shared_prefix_requests(n=4, stagger=3))
    assert res.verdict == "ok", res.error
    assert res.stats["tree_pages"] > 0 and res.stats["prefix_hit_tokens"] > 0
    assert e.manager.tree_swa_pages > 0
    assert e.manager.leaked_pages() == 0
    assert e.manager.num_free_pages + e.manager.tree_pages == e.manager.total_pages


def test_swa_models_run_no_tree_under_the_chunk_cache():
    cfg = EngineConfig(page_size=PS, pool_tokens=2048 * PS, max_context=1024, window=128, layer_pattern="1:1",
                       prefix_cache="chunk", audit="raise")
    e = Engine(cfg)
    assert e.manager.prefix is None
    res = e.run(shared_prefix_requests(n=4))
    assert res.verdict == "ok" and res.stats["tree_pages"] == 0


def branching_run():
    """Four requests of 512 shared + 64 own tokens, window 128, ps 16, staggered; the trace's
    SWA tree records (the worked example of the SWA checkpoint and branching point)."""
    import io
    import json

    from mini_engine.engine import open_trace

    cfg = EngineConfig(page_size=PS, pool_tokens=2048 * PS, max_context=1024, window=128, layer_pattern="1:1",
                       audit="raise")
    buf = io.StringIO()
    with open_trace(cfg, buf) as trace:
        res = Engine(cfg, trace=trace).run(shared_prefix_requests(n=4, stagger=3))
    assert res.verdict == "ok", res.error
    return res, [json.loads(x) for x in buf.getvalue().splitlines()]


def test_the_swa_checkpoint_moves_the_window_and_a_branching_point_restores_the_shared_prefix():
    # Request 0's checkpoint after its 576-token prefill moves its window first (SGLang's
    # free_out_of_window_slots(req, 575)): 575 - 128 = 447, page-floored 432, so the insert
    # keeps SWA for [432, 576) only. Request 1's match: the FULL hit is 512 but [432, 512)
    # is 80 < 128 tokens of live SWA, so it shares nothing and its branching point is 512;
    # its checkpoint inserts [0, 512) behind a window moved to 511 - 128 -> 368, which gives
    # the shared prefix live SWA on [368, 512). Requests 2 and 3 then share all 512.
    res, lines = branching_run()
    # The admissions' matches: not the waiting-prefix refresh's touches (sglang-0.5.23).
    first = [r for r in lines[1:] if r["op"] in ("swa_match", "swa_insert") and not r.get("touch")][:8]
    assert [(r["op"], r["rid"], r["matched"] if r["op"] == "swa_match" else r["len"],
             r.get("full_hit", r.get("swa_evicted_seqlen"))) for r in first] == [
        ("swa_match", 0, 0, 0), ("swa_insert", 0, 576, 432),
        ("swa_match", 1, 0, 512), ("swa_insert", 1, 512, 368),
        ("swa_match", 2, 512, 512), ("swa_insert", 2, 576, 512),
        ("swa_match", 3, 512, 512), ("swa_insert", 3, 576, 512)]
    assert res.stats["prefix_hit_tokens"] == 2 * 512


def test_before_the_branching_point_the_shared_prefix_is_never_shared_again():
    # 0.5.18 (the pre-35265 profile) moves the window at the checkpoint too but has no
    # branching point: nobody gives the shared prefix live SWA again, so no request shares it.
    cfg = EngineConfig(page_size=PS, pool_tokens=2048 * PS, max_context=1024, window=128, layer_pattern="1:1",
                       audit="raise", profile="sglang-pre-35265")
    res = Engine(cfg).run(shared_prefix_requests(n=4, stagger=3))
    assert res.verdict == "ok" and res.stats["prefix_hit_tokens"] == 0
