"""After a retraction the kept batch is in SGLang's retraction order.

SGLang 0.5.23's retract_decode sorts the batch by (len(output_ids), -len(prompt)),
descending and stable, pops its victims from the end and ends with
filter_batch(keep_indices=sorted_indices): the requests it keeps stay in that order
(most outputs first, then the shortest prompt), and later requests merge after them.
Worked case (the last case of conform's test_decode_order_vs_sglang): ps 1, 96 slots,
SWA window 8; prompts 25, 12, 18 with 15, 15, 13 outputs after 16 steps. Request 2
(fewest outputs) is retracted; (15, -12) > (15, -25), so request 1 now goes first.
"""

from __future__ import annotations

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.request import Request
from mini_engine.scheduler.retraction import Retraction


def test_the_kept_batch_is_re_sorted():
    cfg = EngineConfig(page_size=1, pool_tokens=96, swa_ratio=0.5, window=8, swa_eviction_interval=4,
                       prefix_cache="chunk", layer_pattern="1:1", max_context=128, overlap="off")
    eng = Engine(cfg)
    eng.sched.ratio = eng.sched.rules.min
    reqs = [Request(i, list(range(1, p + 1)), 16) for i, p in enumerate([25, 12, 18])]
    eng.submit(reqs)
    for _ in range(16):
        eng.tick()
    assert [len(r.outputs) for r in reqs] == [15, 15, 13]
    got = eng.sched.reserve_decode(eng.sched.decode_batch())
    assert eng.sched.retractions == 1 and reqs[2] not in eng.sched.running
    assert [r.rid for r in got] == [1, 0]
    assert [r.rid for r in eng.sched.decode_batch()] == [1, 0]  # and so are the next steps
    assert eng.run().verdict == "ok"


def test_ties_keep_their_batch_order_and_newest_keeps_admission():
    a, b, c = (Request(i, [1] * p, 8, outputs=[0] * o) for i, (p, o) in enumerate([(20, 3), (20, 3), (10, 2)]))
    assert Retraction("sglang").kept_order([c, a, b]) == [a, b, c]
    assert Retraction("newest").kept_order([c, a, b]) == [c, a, b]


def _requeued(profile: str) -> list[int]:
    """The waiting queue after requests 1 and then 2 are retracted while request 3 waits
    (max_running 3: requests 0, 1, 2 run after the first pass)."""
    eng = Engine(EngineConfig(page_size=16, pool_tokens=4096, max_running=3, max_context=128, overlap="off",
                              profile=profile))
    reqs = [Request(i, [10 + i] * 32, 8) for i in range(4)]
    eng.submit(reqs)
    eng.tick()
    assert [r.rid for r in eng.sched.running] == [0, 1, 2] and [r.rid for r in eng.sched.waiting] == [3]
    eng.sched.retract(reqs[1])
    eng.sched.retract(reqs[2])
    return [r.rid for r in eng.sched.waiting]


def test_sglang_0523_requeues_retracted_requests_at_the_back_in_retraction_order():
    # update_running_batch: for req in retracted_reqs: _add_request_to_queue (waiting_queue.append)
    assert _requeued("sglang-0.5.23") == [3, 1, 2]
    # kvbench's rule, which the designs keep: each at the front, so the last retracted leads
    assert _requeued("host-aligned") == [2, 1, 3]


def test_0518_requeues_retracted_requests_behind_the_queue():
    # SGLang 0.5.18's update_running_batch appends them the same way, and its fcfs policy
    # never sorts the queue: the invariants suite's EAGLE topk 4 at ps 256 differed from its
    # loop from step 15 (running 9 against 3) while sglang-pre-35265 kept kvbench's front.
    assert _requeued("sglang-pre-35265") == [3, 1, 2]
