"""A decode step calls the allocator in SGLang 0.5.23's order: retract, then evict, then reserve.

SGLang's Scheduler.update_running_batch decides whether the step fits on the pools as
they are (ScheduleBatch.check_decode_mem: the step's slots against min(full, swa)
available) and retract_decode retracts until it does; only then does
prepare_for_decode run maybe_evict_swa (the window eviction) and allocate. So a
request is retracted even when the eviction would have made room.

Worked case (numbers read from that code): ps 1, a 64-slot full pool, swa_ratio 0.75
(48 SWA slots), window 20, eviction interval 4, chunk cache. Two requests, prompts of
20, 8 outputs each, the new-token ratio at its floor so admission takes both.
Prefill: 40 slots of each pool, 8 SWA slots free. Decode steps 1-4 take 2 slots each:
after step 4 the SWA pool is full and each request has committed 24. Step 5 needs 2
SWA slots, 0 are free: check_decode_mem fails. retract_decode pops the last of the
batch sorted by (outputs, -prompt) descending; both keys are (5, -20), so request 1
(latest in the batch) goes and its 24 + 24 slots come back; 1 slot for request 0 now
fits. maybe_evict_swa moves request 0's cursor to 24 - 20 = 4 (the gate 24 - 20 >=
0 + 4 holds), freeing 4 SWA slots, and the allocation takes 1 of each pool: 27 SWA
and 39 full slots free. kvbench's former order (evict first) freed 4 + 4 SWA slots and
retracted nothing (6 SWA, 14 full free). Under overlap maybe_evict_swa's pre_len,
req.seqlen - 1, lacks step 4's in-flight token: 20 + 4 - 1 = 23, and 23 - 20 >= 0 + 4
does not hold, so step 5 evicts nothing (23 SWA slots free) and step 6 moves the
cursor to 4 (test_swa_overlap_cadence).
"""

from __future__ import annotations

import io
import json

import pytest

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine, open_trace
from mini_engine.request import Request, Status


def tight_swa(overlap: str = "on") -> EngineConfig:
    return EngineConfig(page_size=1, pool_tokens=64, window=20, layer_pattern="1:1", swa_ratio=0.75,
                        swa_eviction_interval=4, prefix_cache="chunk", max_context=64, overlap=overlap)


def engine(cfg: EngineConfig, trace=None) -> tuple[Engine, list[Request]]:
    eng = Engine(cfg, trace=trace)
    eng.sched.ratio = eng.sched.rules.min  # a server that has decoded 600 steps: admission takes both
    reqs = [Request(0, list(range(1, 21)), 8), Request(1, list(range(2, 22)), 8)]
    eng.submit(reqs)
    return eng, reqs


@pytest.mark.parametrize("overlap", ["on", "off"])
def test_retracts_before_the_window_eviction_would_make_room(overlap):
    eng, (a, b) = engine(tight_swa(overlap))
    swa = eng.manager.swa.allocator
    for _ in range(5):  # the prefill and decode steps 1-4
        eng.tick()
    assert swa.num_free_pages == 0 and eng.manager.num_free_pages == 16
    # Under overlap step 4's token is committed when step 5 is planned (alloc_for_decode's count).
    in_flight = 1 if overlap == "on" else 0
    assert (a.kv.committed + in_flight, b.kv.committed + in_flight, a.kv.swa_evicted) == (24, 24, 0)
    eng.tick()  # decode step 5
    assert eng.sched.retractions == 1 and eng.sched.swa_retractions == 1
    assert b.status is Status.WAITING and a.status is Status.RUNNING  # the tie goes to the latest
    evicted = 0 if overlap == "on" else 4  # overlap: pre_len 23, not due until step 6
    assert a.kv.swa_evicted == evicted and a.kv.allocated == 25
    assert swa.num_free_pages == 23 + evicted and eng.manager.num_free_pages == 39
    res = eng.run()
    assert res.verdict == "ok" and res.stats["leaked_pages"] == 0
    assert all(len(o) == 8 for o in res.outputs.values())


@pytest.mark.parametrize("overlap", ["on", "off"])
def test_the_step_calls_release_then_evict_then_reserve(overlap):
    cfg = tight_swa(overlap)
    buf = io.StringIO()
    with open_trace(cfg, buf) as trace:
        eng, _ = engine(cfg, trace)
        for _ in range(5):
            eng.tick()
        mark = len(buf.getvalue().splitlines())
        eng.tick()
        step = [json.loads(x) for x in buf.getvalue().splitlines()[mark:]]
    ops = [(r["op"], r.get("pool")) for r in step]
    # Request 1's release: its SWA part, then its full part (segment free); then request 0's
    # window eviction (SWA only; not yet under overlap); then the reservation and its two allocations.
    evict = [("free_pages", "swa")] if overlap == "off" else []
    assert ops == [("free_pages", "swa"), ("free_pages", "full"), *evict,
                   ("prepare", None), ("alloc_extend", "full"), ("alloc_extend", "swa")]
    assert len(step[0]["page_ids"]) == 24 and (overlap == "on" or len(step[2]["page_ids"]) == 4)
    assert [q["rid"] for q in step[2 + len(evict)]["reqs"]] == [0]

