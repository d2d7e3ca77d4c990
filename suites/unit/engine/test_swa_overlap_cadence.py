"""Plain decode with SWA under the overlap scheduler: SGLang evicts one decode step later.

SGLang 0.5.23's ScheduleBatch.maybe_evict_swa (prepare_for_decode, before the
allocation) evicts at pre_len = req.seqlen - 1 = prompt + len(output_ids) - 1, due
when pre_len - window >= cursor + SGLANG_SWA_EVICTION_INTERVAL (128). Plain decode's
alloc_for_decode commits the in-flight token when it allocates, but under overlap
output_ids only grows when that result is processed, after the next plan: pre_len is
the committed length less one.

Worked example: prompt 37, ps 16, window 32, interval 128, radix threshold
pre_len - ceil16(max(32, 16)) = pre_len - 32. Due first at pre_len 160, cursor
floor16(160 - 32) = 128.
  - synchronous: output_ids has 124 tokens at the plan of decode batch 124
    (pre_len 37 + 124 - 1 = 160 = committed): evicts there;
  - overlap: at that plan the host has committed 160 (the in-flight token included)
    but output_ids holds 123 (pre_len 159, not due); the next plan sees 160.
"""

from __future__ import annotations

import pytest

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.request import Request


@pytest.mark.parametrize("overlap, batch, outputs", [("off", 124, 124), ("on", 125, 124)])
def test_first_swa_eviction_of_plain_decode(overlap, batch, outputs):
    cfg = EngineConfig(page_size=16, window=32, layer_pattern="1:1", pool_tokens=1 << 14, max_context=512,
                       overlap=overlap)
    eng = Engine(cfg)
    eng.submit([Request(0, list(range(1, 38)), 200)])
    r, first = None, None
    while eng.sched.has_work() and first is None:
        r = eng.requests[0]
        outs = len(r.outputs)  # output_ids when this tick plans (overlap: the in-flight token not in it)
        eng.tick()
        if r.kv is not None and r.kv.swa_evicted:
            first = (r.decode_batches, r.kv.swa_evicted, outs)
    assert first == (batch, 128, outputs)
    # The plan of that batch saw pre_len 37 + outputs - 1 = 160. The host has committed 161
    # after it: synchronous, 160 at the plan plus the step's token; overlap, 161 at the plan
    # (the in-flight token), the step's own token still in flight.
    assert 37 + outputs - 1 == 160 and r.kv.committed == 161


def test_speculative_decode_is_not_shifted():
    """Under spec-v2 overlap output_ids and kv_committed_len lag together (seqlen - 1 is
    the stale committed length), so DFLASH keeps its eviction point (the worked example
    of test_profiles_engine: decode step 17 under overlap)."""
    cfg = EngineConfig(spec="dflash", block_size=16, page_size=16, window=32, layer_pattern="1:1", accept_len=8,
                       pool_tokens=1 << 14, max_context=512, overlap="on")
    eng = Engine(cfg)
    eng.submit([Request(0, list(range(1, 38)), 200)])
    while eng.sched.has_work():
        eng.tick()
        r = eng.requests[0]
        if r.kv is not None and r.kv.swa_evicted:
            assert r.decode_batches - 1 == 17
            return
    raise AssertionError("no eviction")
