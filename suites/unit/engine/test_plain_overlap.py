"""Plain decode under overlap scheduling: not stale, but its frees land one plan late.

SGLang 0.5.23's Scheduler.event_loop_overlap runs plain decode overlapped too: step
N+1 is planned (get_next_batch_to_run -> update_running_batch -> prepare_for_decode ->
alloc_for_decode) before step N's result is processed (process_batch_result_decode,
where a finished request's release_kv_cache frees its pages, in that result's free
group). alloc_for_decode counts the new token committed when it allocates, so the plan
is not stale; a request step N finishes is exactly one output short when N+1 is planned
(plain decode adds one token a step), so _reqs_finishing_inflight leaves it out, and
its pages come back only after N+1's allocation.

Worked case (ps 4, a 16-page pool): request 0 (prompt 4, 2 outputs) and request 1
(prompt 7, 4 outputs). Prefill (one call): request 0 takes page 1 (slots 4-7), request 1
pages 2 and 3 (slots 8-14). Decode step 1: request 0's position 4 takes page 4 (slot 16),
request 1's position 7 is slot 15 of page 3; its result finishes request 0. Step 2:
request 1's position 8 needs a page. Synchronous (--disable-overlap-schedule): request
0's release has put pages [1, 4] in front of the free list, so it gets page 1 (slot 4).
Overlapped: request 0 still holds them when step 2 allocates, so it gets page 5 (slot
20), and [1, 4] are freed after. The last result then lands in a step of its own.
"""

from __future__ import annotations

import io
import json

import pytest

from harness.run.runner import run_config
from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine, open_trace
from mini_engine.request import Request


def _calls(overlap: str) -> tuple[list[tuple], int]:
    # The chunk cache: the two prompts share a prefix, and these pin the free order without a tree.
    cfg = EngineConfig(page_size=4, pool_tokens=64, max_context=64, overlap=overlap, prefix_cache="chunk")
    buf = io.StringIO()
    with open_trace(cfg, buf) as trace:
        res = Engine(cfg, trace=trace).run([Request(0, [1, 2, 3, 4], 2), Request(1, [1, 2, 3, 4, 5, 6, 7], 4)])
    assert res.verdict == "ok" and res.violations == {} and res.stats["leaked_pages"] == 0
    recs = [json.loads(x) for x in buf.getvalue().splitlines()[1:]]
    out = []
    for r in recs:
        if r["op"] == "alloc_extend":
            out.append(("alloc", r["out"]))
        elif r["op"] == "free_pages":
            out.append(("free", r["page_ids"]))
        else:
            out.append(("prepare", [(q["rid"], q["committed"], q["cur"], q["nxt"]) for q in r["reqs"]]))
    return out, res.stats["steps"]


PREFILL = [("alloc", [[4, 5, 6, 7], [8, 9, 10, 11, 12, 13, 14]]),  # the prefill batch: one call
           ("prepare", [(0, 4, 4, 5), (1, 7, 7, 8)]), ("alloc", [[16], [15]])]


def test_overlapped_plain_decode_allocates_before_the_finished_request_is_freed():
    calls, steps = _calls("on")
    assert calls == PREFILL + [
        ("prepare", [(1, 8, 8, 9)]), ("alloc", [[20]]), ("free", [1, 4]),  # page 5, then request 0's frees
        ("prepare", [(1, 9, 9, 10)]), ("alloc", [[21]]), ("free", [2, 3, 5])]
    assert steps == 5  # prefill, 3 decode steps, and the step where the last result lands


def test_synchronous_plain_decode_frees_first():
    calls, steps = _calls("off")
    assert calls == PREFILL + [
        ("free", [1, 4]), ("prepare", [(1, 8, 8, 9)]), ("alloc", [[4]]),  # page 1, just freed
        ("prepare", [(1, 9, 9, 10)]), ("alloc", [[5]]), ("free", [2, 3, 1])]
    assert steps == 4


@pytest.mark.parametrize("extra", [{}, dict(window=64, layer_pattern="1:1"), dict(workload="pd", pd_fraction=0.5)])
def test_plain_decode_plans_from_current_lengths(extra, tmp_path):
    """Every overlapped plain-decode reservation is one slot past the true committed length
    (the in-flight token counted, as alloc_for_decode does): nothing is stale, and no request
    gets an extra reservation. Outputs equal the synchronous run's."""
    base = dict(spec="none", page_size=16, num_requests=24, input_len=200, output_len=60, pool_tokens=1024, **extra)
    on = run_config(dict(base, overlap="on"), trace=str(tmp_path / "on.jsonl"))
    off = run_config(dict(base, overlap="off"))
    assert on["status"] == off["status"] == "ok"
    preps = [json.loads(x) for x in open(tmp_path / "on.jsonl")][1:]
    reqs = [q for r in preps if r["op"] == "prepare" for q in r["reqs"]]
    assert reqs and all(q["nxt"] == q["committed"] + 1 == q["cur"] + 1 for q in reqs)
    m = on["metrics"]
    # one slot ahead of the true committed length per reservation: the one the step writes
    assert m["overlap_extra_reservations"] == 0 and m["reserved_ahead_slots_sum"] == len(reqs)
    assert m["output_tokens"] == off["metrics"]["output_tokens"]
