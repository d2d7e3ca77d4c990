"""The engine's public on_finish hook: called once per request that finished with all its
outputs, after its release; never for a retraction. Sessions (mini_engine/scheduler/sessions.py)
submit a next turn from it."""

from __future__ import annotations

import gc
import weakref

from harness.core.workloads import WorkloadConfig, make_requests
from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.request import Request
from mini_engine.scheduler.sessions import NextTurn, SessionEngine

# Long outputs on a pool of ~1.3 requests under kvbench's optimistic admission estimate
# (SGLang's own budget counts a fixed-length request's outputs whole, so it would not retract).
TIGHT = dict(page_size=1, pool_tokens=400, max_running=24, admission="estimate")
WORKLOAD = WorkloadConfig(workload="uniform", min_len=5, num_requests=24, input_len=100, output_len=300)


def test_each_request_finishes_once_and_a_retraction_is_no_finish():
    finished: list[tuple[int, int]] = []
    engine = Engine(EngineConfig(**TIGHT), on_finish=lambda r: finished.append((r.rid, r.remaining)))
    reqs = make_requests(WORKLOAD, 0)
    result = engine.run(reqs)
    assert engine.stats.retractions > 0  # the hook was offered retracted requests too
    assert result.verdict == "ok"
    assert sorted(rid for rid, _ in finished) == [r.rid for r in reqs]
    assert {remaining for _, remaining in finished} == {0}  # all its outputs


def test_the_hook_may_submit_a_request():
    cfg = EngineConfig()
    engine = Engine(cfg, on_finish=lambda r: r.rid == 0 and engine.submit(
        [Request(rid=1, prompt=[*r.prompt, *r.outputs, 7], max_new_tokens=3, arrival_step=engine.step_no + 1)]))
    result = engine.run([Request(rid=0, prompt=list(range(10)), max_new_tokens=4)])
    assert result.verdict == "ok"
    assert [r.rid for r in engine.requests] == [0, 1]
    assert len(engine.requests[1].prompt) == 15 and engine.requests[1].remaining == 0


def test_a_session_engine_is_freed_without_a_garbage_collection():
    """Its on_finish is its own method, held weakly: no cycle keeps the pools alive."""
    engine = SessionEngine(EngineConfig(), {0: NextTurn(rid=1, new_tokens=[5, 6], max_new_tokens=2)})
    engine.run([Request(rid=0, prompt=list(range(8)), max_new_tokens=3)])
    assert [r.rid for r in engine.requests] == [0, 1]
    alive = [weakref.ref(engine), weakref.ref(engine.manager)]
    gc.disable()
    try:
        del engine
        assert [r() is None for r in alive] == [True, True]
    finally:
        gc.enable()
