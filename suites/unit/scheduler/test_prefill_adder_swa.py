"""SGLang's SWA admission budget (mini_engine/scheduler/prefill_adder_swa.py), worked with numbers."""

from __future__ import annotations

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.scheduler.prefill_adder_swa import SWAPrefillMemory, estimate_swa_tokens
from mini_engine.request import Request


def _req(rid: int, prompt: int, out: int) -> Request:
    return Request(rid=rid, prompt=list(range(rid * 10000, rid * 10000 + prompt)), max_new_tokens=out)


def _mem(swa_free: int, *, swa_size: int = 2048, chunk: int = 8192) -> SWAPrefillMemory:
    return SWAPrefillMemory(lambda: 1 << 20, lambda: swa_free, 16, [], window=256, swa_size=swa_size,
                            chunk_left=lambda: chunk)


def test_the_estimate_is_the_tail_below_the_window_plus_the_window_plus_a_page():
    # 1008 allocated: 752 below the window, the window (256) kept, a page.
    assert estimate_swa_tokens(1008, 100, window=256, page_size=16) == 752 + 256 + 16 == 1024
    # A chunk limit bounds what one pass allocates; a short request keeps only what it has.
    assert estimate_swa_tokens(1008, 100, window=256, page_size=16, chunk_limit=512) == 256 + 256 + 16
    assert estimate_swa_tokens(48, 100, window=256, page_size=16) == 148 + 16


def test_worked_example_from_the_module_docstring():
    a, b = _req(0, 1000, 100), _req(1, 1000, 100)
    assert not _mem(1024).fits(a, 1000)  # 1024 is not below 1024: it waits (the pool is 2048)
    mem = _mem(1100)
    assert mem.fits(a, 1000) and mem.cap is None
    mem.charge(a, 1000, True)
    assert mem.swa_offset == 1024 and mem.remaining_swa == 76 and mem.has_room
    assert not mem.fits(b, 1000)
    # The continuing chunked request would be parked: 76 - 16 leaves room, 1100 - 1024 - 16 = 60.
    assert mem.continuation(8192) == 60 and _mem(10).continuation(8192) is None


def test_a_request_the_swa_pool_never_holds_joins_with_a_shorter_chunk():
    # SWA pool of 1024, all free: 1024 never fits; the cut leaves the decode headroom
    # min(100, 256) + 16 beside it, floored to pages: 1024 - 116 = 908 -> 896.
    mem = _mem(1024, swa_size=1024)
    assert mem.fits(_req(0, 1000, 100), 1000) and mem.cap == 896


def test_an_swa_engine_under_sglang_admission_takes_two_requests_where_the_estimate_takes_one():
    # ps 16, window 64, an SWA pool of 1024 tokens beside a full one of 1280: two 300-token
    # prompts owing 300 outputs each. SGLang's SWA estimate is (304 - 64) + min(600, 64) + 16
    # = 320 each, and 320 < 1024, then 320 < 704: both join (the full pool's test: 616 < 1280,
    # then 616 < 1280 - 620). kvbench's own estimate charges each its prompt and 0.7 of its
    # outputs in whole pages, 33 pages, against the smaller pool's 64: one joins.
    def first_batch(admission: str) -> list[int]:
        cfg = EngineConfig(spec="none", page_size=16, pool_tokens=1280, chunked_prefill=1024, window=64,
                           layer_pattern="1:1", swa_ratio=0.8, admission=admission, max_context=4096)
        eng = Engine(cfg)
        eng.submit([_req(0, 300, 300), _req(1, 300, 300)])
        eng.sched.arrive(0)
        chunks, _ = eng.sched.admit()
        assert eng.manager.swa.allocator.num_pages * 16 == 1024 or not chunks
        return [c.req.rid for c in chunks]

    assert first_batch("sglang") == [0, 1]
    assert first_batch("estimate") == [0]
