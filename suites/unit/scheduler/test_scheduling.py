"""Scheduler decisions pinned on small seeded runs: admission counts the decode
reservation and the running requests' growth, retraction takes the newest, SWA
eviction follows the window on every decode step."""

from __future__ import annotations

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine, StepOutcome
from mini_engine.request import Request


def _reqs(n: int, prompt: int, out: int) -> list[Request]:
    return [Request(rid=i, prompt=list(range(prompt)), max_new_tokens=out) for i in range(n)]


def test_admission_counts_the_reservation():
    # DFLASH block 16 reserves 32 slots: a request of 32 prompt + 20 output tokens
    # reaches ceil_ps(51 + 32) = 96 (6 pages). An 8-page pool holds one such request:
    # admitting the second on its prompt alone (4 pages) would force a retraction.
    # kvbench's own estimate (admission = "estimate", the designs' rule) counts it.
    cfg = EngineConfig(spec="dflash", block_size=16, page_size=16, accept_len=1, pool_tokens=8 * 16,
                       admission="estimate")
    result = Engine(cfg).run(_reqs(2, 32, 20))
    assert result.verdict == "ok"
    assert result.stats["peak_running"] == 1 and result.stats["retractions"] == 0


def test_sglangs_admission_does_not_count_the_reservation():
    # SGLang's PrefillAdder counts prompt + outputs + a page, not the speculative
    # reservation: once A decodes, B (its prompt's first page shared, A's outputs
    # counted at ratio 1.0) joins, and the reservation then retracts one.
    cfg = EngineConfig(spec="dflash", block_size=16, page_size=16, accept_len=1, pool_tokens=8 * 16)
    result = Engine(cfg).run(_reqs(2, 32, 20))
    assert result.verdict == "ok"
    assert result.stats["peak_running"] == 2 and result.stats["retractions"] == 1


def test_admission_keeps_headroom_for_running_requests():
    # A decodes a long output; B arrives later. Counting A's remaining growth keeps
    # B out until A is done, so nothing is retracted.
    cfg = EngineConfig(spec="none", page_size=16, pool_tokens=12 * 16)
    a = Request(rid=0, prompt=list(range(16)), max_new_tokens=150)
    b = Request(rid=1, prompt=list(range(16)), max_new_tokens=150, arrival_step=20)
    result = Engine(cfg).run([a, b])
    assert result.verdict == "ok" and result.stats["retractions"] == 0


def test_retraction_takes_the_newest():
    # kvbench's optimistic estimate admits more than the pool holds (SGLang's admission,
    # counting fixed-length outputs whole, would not: nothing to retract).
    cfg = EngineConfig(spec="dflash", block_size=4, page_size=1, pool_tokens=400, max_running=24,
                       admission="estimate")
    reqs = [Request(rid=i, prompt=list(range(20 + i)), max_new_tokens=200) for i in range(8)]
    engine = Engine(cfg)
    result = engine.run(reqs)
    assert result.verdict == "ok" and result.stats["retractions"] > 0
    # The oldest always progresses: the first request admitted is never retracted.
    assert reqs[0].retractions == 0


def test_swa_cursor_follows_the_window_every_decode_step():
    """Interval 1 with the chunk cache: from a request's second decode batch on, the
    prepare of each step moves the cursor to floor_ps(committed - window)."""
    ps, window = 16, 40
    cfg = EngineConfig(spec="dflash", block_size=4, accept_len=3, page_size=ps, window=window,
                       pool_tokens=64 * ps, swa_eviction_interval=1, prefix_cache="chunk")
    engine = Engine(cfg)
    engine.submit(_reqs(3, 30, 120))
    checked = 0
    while engine.sched.has_work():
        before = engine.stats.decode_steps
        steps = {r.rid: r.spec_steps for r in engine.sched.running}
        committed = {r.rid: r.kv.committed for r in engine.sched.running if r.kv is not None}
        assert engine.tick() is not StepOutcome.EXHAUSTED
        if engine.stats.decode_steps == before:
            continue
        for r in engine.sched.running:
            if r.spec_steps > steps.get(r.rid, r.spec_steps) and r.decode_batches >= 2:
                assert r.kv.swa_evicted == max(0, committed[r.rid] - window) // ps * ps
                checked += 1
    assert checked > 100
    assert engine.manager.leaked_pages() == 0
