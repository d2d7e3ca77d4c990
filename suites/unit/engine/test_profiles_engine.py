"""The profiles through the whole engine: SWA cadence, PD, row headroom (K4), metrics, trace."""

from __future__ import annotations

import io
import json

import pytest

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine, open_trace
from mini_engine.errors import ConfigError
from mini_engine.request import Request
from mini_engine.run_result import run_result


def one_dflash_request(trace_file=None, **opts):
    base = dict(spec="dflash", block_size=16, page_size=16, window=32, layer_pattern="1:1", accept_len=8,
                pool_tokens=1 << 14, max_context=512)
    cfg = EngineConfig(**{**base, **opts})
    eng = Engine(cfg, trace=open_trace(cfg, trace_file) if trace_file is not None else None)
    eng.submit([Request(0, list(range(1, 38)), 200)])  # prompt 37
    return eng


@pytest.mark.parametrize("overlap, step", [("off", 16), ("on", 17)])
def test_swa_worked_example_first_eviction_at_decode_step_16(overlap, step):
    """DFLASH block 16, prompt 37, 8 accepted per step, ps 16, window 32, interval 128.

    SGLang evicts in prepare_for_decode when seqlen - 1 - window >= cursor + 128
    (seqlen - 1 = committed): committed 165 = 37 + 16 * 8 at decode step 16 (0-based),
    to floor16(165 - ceil16(max(32, 16))) = 128. Before that the SWA pool holds the
    whole extent: ceil16(157 + 32) = 192 slots = 12 pages, the peak. Under overlap the
    plan of step k sees the committed length of step k - 1 (one result still in
    flight): 165 first shows in the plan of step 17.
    """
    eng = one_dflash_request(overlap=overlap)
    m = eng.manager
    cursors, held = [], []
    while eng.sched.has_work():
        eng.tick()
        r = eng.requests[0]
        if r.kv is not None and r.decode_batches:
            cursors.append((r.decode_batches - 1, r.kv.committed, r.kv.swa_evicted))
        held.append(m.swa_pages_held + m.tree_swa_pages)  # the SWA pool's pages in use
    first = next((step, c) for step, c, cur in cursors if cur > 0)
    # the cursor moves in the prepare of the decode step whose plan sees committed 165;
    # after the step the host has committed 173 (overlap: the previous step's result landed)
    assert first == (step, 165 + 8)
    assert [cur for s, _, cur in cursors if s == step] == [128]
    assert all(cur == 0 for s, _, cur in cursors if s < step)
    assert max(held[:step + 2]) == 12
    # The prompt's 2 whole pages are the SWA-aware tree's after the prefill's checkpoint,
    # so the request itself holds 10 of the 12 (memory/tree/swa_prefix.py).
    res = run_result(eng, eng.requests, "ok", 1.0)
    assert res.stats["peak_swa_pages_held"] == 10


def test_no_eviction_in_the_first_decode_batch_even_at_interval_1():
    eng = one_dflash_request(swa_eviction_interval=1, prefix_cache="chunk")
    eng.submit([Request(1, list(range(1, 101)), 40)])
    seen = []
    while eng.sched.has_work():
        eng.tick()
        for r in eng.requests:
            if r.kv is not None and r.decode_batches == 1:
                seen.append(r.kv.swa_evicted)
    assert seen and all(c == 0 for c in seen)  # a 100-token prompt is past the window, yet no eviction


@pytest.mark.parametrize("overlap, seen", [("off", [(192, 96)]), ("on", [(128, 0), (192, 32), (256, 96)])])
def test_chunk_cache_evicts_during_chunked_prefill(overlap, seen):
    eng = one_dflash_request(prefix_cache="chunk", chunked_prefill=64, overlap=overlap)
    eng.requests.clear()
    eng.sched.future.clear()
    eng.submit([Request(7, list(range(1, 301)), 8)])
    cursors = []
    while eng.sched.has_work():
        eng.tick()
        r = eng.requests[0]
        if r.kv is not None and r.prefilling:
            cursors.append((r.prefilled, r.kv.swa_evicted))
    # off: the chunk that starts at 128 evicts to floor16(128 - 32) = 96. on (SGLang's
    # maybe_evict_swa under overlap): not before the third chunk, whose eviction point is
    # 128 - 64 (one chunked_prefill_size back) -> floor16(64 - 32) = 32; the fourth's 96.
    assert all(c in cursors for c in seen)


@pytest.mark.parametrize("ps, profile, fires", [(1, "sglang-0.5.23", True), (16, "sglang-0.5.23", False),
                                                (1, "host-aligned", False), (1, "sglang-pre-35265", True)])
def test_dflash_block_16_row_overflow_k4(ps, profile, fires):
    """SGLang sizes rows 4 + num_draft_tokens = 20 beyond the context at ps 1, where the
    DFLASH reservation needs 2 * 16 = 32: a request that runs up to max_context overflows."""
    cfg = EngineConfig(spec="dflash", block_size=16, page_size=ps, profile=profile, accept_len=8,
                       max_context=160, pool_tokens=1 << 14)
    eng = Engine(cfg)
    res = eng.run([Request(i, list(range(1, 61)), 100) for i in range(3)])  # 60 + 100 = max_context
    assert (res.violations.get("K4", 0) > 0) == fires
    assert (res.stats["row_overflow_slots"] > 0) == fires
    # SGLang writes past the row and frees the row's slice only: every slot past a row
    # leaks (memory.overflow), and two of the three rows have a next row to overwrite.
    assert res.stats["leaked_pages"] == res.stats["row_overflow_slots"] == (24 if fires else 0)
    assert res.stats["row_overwritten_slots"] == (16 if fires else 0)


def test_pd_ps1_fill_50_window_32_through_the_engine():
    cfg = EngineConfig(page_size=1, window=32, layer_pattern="1:1", pool_tokens=4096, max_context=256)
    eng = Engine(cfg)
    r = Request(0, list(range(1, 51)), 5, fill_len=50)
    eng.submit([r])
    eng.tick()
    assert r.kv.swa_evicted == 0 and eng.manager.swa_pages_held >= 50


def test_trace_header_records_the_profile_and_prepare_says_aligned():
    buf = io.StringIO()
    eng = one_dflash_request(buf, profile="sglang-pre-35265")
    eng.run()
    lines = [json.loads(x) for x in buf.getvalue().splitlines()]
    head = lines[0]
    assert head["profile"]["name"] == "sglang-pre-35265" and head["profile"]["align"] == ["eagle"]
    # 0.5.18's release (a unique free of the committed row) and its overlap plan
    assert head["profile"]["free"] == "unique-row" and head["profile"]["swa_eviction_interval"] == 128
    assert head["profile"]["overlap_plan"] == "every-running"
    prepares = [x for x in lines[1:] if x["op"] == "prepare"]
    assert prepares and all(x["aligned"] is False and x["policy"] == "unaligned" for x in prepares)


def test_swa_ratio_sizes_the_swa_pool_and_admission_sees_the_smaller():
    cfg = EngineConfig(page_size=16, window=32, layer_pattern="1:1", pool_tokens=1600, swa_ratio=0.5)
    eng = Engine(cfg)
    assert eng.mem.swa_num_pages == 50 and eng.mem.num_pages == 100
    assert eng.sched._free_pages() == 50


def test_sglang_retraction_order_and_ratio():
    """SGLang retracts the request with the fewest outputs (longest prompt on a tie) and
    re-estimates the ratio as (decoded + 20 n) / (max_new + 1) over the batch that stays."""
    from mini_engine.scheduler.retraction import Retraction

    rules = Retraction("sglang")
    a, b, c = Request(0, [1] * 10, 50), Request(1, [1] * 30, 50), Request(2, [1] * 20, 50)
    a.outputs, b.outputs, c.outputs = [1] * 9, [1] * 3, [1] * 3
    assert rules.victim([a, b, c], [a, b, c]) is b  # 3 outputs, the longer prompt
    assert rules.ratio_after(0.5, [a, c]) == pytest.approx((12 + 40) / 101)
    assert rules.init == 0.7 and rules.min == pytest.approx(0.098)
    r = 0.7
    for _ in range(600):
        r = rules.decay_step(r)
    assert r == pytest.approx(0.098)
    assert Retraction("newest").victim([a, b, c], [a, b, c]) is c


def test_sglang_retraction_under_pressure_finishes_everything():
    # kvbench's optimistic admission estimate makes the pressure (SGLang's admission counts
    # these fixed-length outputs whole and admits only what it can finish here).
    cfg = EngineConfig(spec="dflash", block_size=16, page_size=16, accept_len=8, pool_tokens=1024,
                       max_context=512, admission="estimate")
    res = Engine(cfg).run([Request(i, list(range(1, 21 + i)), 400) for i in range(6)])
    assert res.verdict == "ok" and res.stats["retractions"] > 0 and res.stats["leaked_pages"] == 0
    assert all(len(o) == 400 for o in res.outputs.values())


def test_draft_window_does_not_widen_the_swa_window():
    def cursors(**opts):
        eng = one_dflash_request(**opts)
        out = []
        while eng.sched.has_work():
            eng.tick()
            r = eng.requests[0]
            out.append(None if r.kv is None else r.kv.swa_evicted)
        return out

    assert cursors(draft_window=96) == cursors()


@pytest.mark.parametrize("window, ps, ok", [(40, 16, False), (48, 16, True), (8, 16, True), (32, 64, True)])
def test_the_0518_profile_refuses_a_window_that_is_not_whole_pages(window, ps, ok):
    # 0.5.18 keeps max(window, ps) below a moved window without rounding it up to pages;
    # kvbench has 0.5.23's rounded rule, the same only for whole pages or at most one page.
    make = lambda: EngineConfig(window=window, page_size=ps, profile="sglang-pre-35265")  # noqa: E731
    if ok:
        make()
        return
    with pytest.raises(ConfigError, match="window=40 with page_size=16 .* not modelled"):
        make()
    EngineConfig(window=window, page_size=ps, profile="sglang-0.5.23")  # 0.5.23's own rule
    EngineConfig(window=window, page_size=ps, profile="sglang-pre-35265", prefix_cache="chunk")  # keeps the window
