"""A prefill batch's result lands one iteration late under overlap (mini_engine/prefill/step.py).

SGLang's event_loop_overlap forms and launches the next batch (get_next_batch_to_run:
admission and prefix matching included) before it processes the previous batch's result
(process_batch_result_prefill: the first output token, the finish of a request whose first
output is its last, checkpoint_kv_cache of the prompt into the tree, which frees the
request's copies of pages the tree already held), for two prefills in a row too
(SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP defaults to false). 0.5.23 and 0.5.18 alike.

The worked case, page size 16, the radix cache: requests A (step 0) and B (step 1) share a
64-token prefix and have 16 tokens of their own each, 4 outputs.

* Overlap off: A's prefill result checkpoints its 80 tokens in step 0; B matches the
  page-aligned part of its first 79 tokens, 64, and allocates one page. Pages held after
  each step: 5, 6, then 8 once both decode (a page each for position 80).
* Overlap on: B is admitted in step 1 before A's result lands: it matches nothing and
  allocates 5 pages; A's checkpoint lands after that (10 held). B's own result lands in
  step 2, after that step's decode allocation: its insert finds A's 64 tokens and frees B's
  4 duplicate pages (10 - 4 + 2 = 8). Hits 0, peak 10; the last result lands in a step of
  its own (6 steps, not 5).
"""

from __future__ import annotations

import pytest

from harness.core.run_spec import RunSpec
from harness.core.workloads import make_workload
from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.request import Request

SHARED = list(range(1, 65))


def _run(overlap: bool, profile: str = "sglang-0.5.23"):
    cfg = EngineConfig(page_size=16, pool_tokens=256 * 16, max_context=512, overlap=overlap, audit="raise",
                       profile=profile)
    a = Request(rid=0, prompt=SHARED + [1000 + i for i in range(16)], max_new_tokens=4)
    b = Request(rid=1, prompt=SHARED + [2000 + i for i in range(16)], max_new_tokens=4, arrival_step=1)
    res = Engine(cfg).run([a, b])
    assert res.verdict == "ok", res.error
    return res


def test_without_overlap_the_second_request_shares_the_first_ones_prefix():
    res = _run(overlap=False)
    assert res.stats["prefix_hit_tokens"] == 64
    assert res.series["held"] == [5, 6, 8, 8, 0]
    assert res.stats["steps"] == 5


@pytest.mark.parametrize("profile, tail", [
    ("sglang-0.5.23", []),
    # 0.5.18 plans every running request: the last decode batch is launched for the request
    # its result in flight finishes, and that batch's result lands a step later (launch_finished).
    ("sglang-pre-35265", [0]),
])
def test_under_overlap_the_second_request_is_admitted_before_the_first_result_lands(profile, tail):
    res = _run(overlap=True, profile=profile)
    assert res.stats["prefix_hit_tokens"] == 0
    assert res.series["held"] == [5, 10, 8, 8, 8, 0] + tail
    assert res.stats["peak_pages_used"] == 10 and res.stats["steps"] == 6 + len(tail)
    assert res.stats["tree_pages"] == _run(overlap=False).stats["tree_pages"] == 6  # the same tree after the drain


def _figures(args: dict) -> dict:
    spec = RunSpec.parse(args)
    cfg = spec.engine
    work = make_workload(spec.workload, cfg.seed, max_context=cfg.max_context)
    res = Engine(cfg).run(work.requests)
    assert res.verdict == "ok", res.error
    return res.stats


@pytest.mark.parametrize("args, hits, peak_used", [
    # SGLang 0.5.23's own loop (kvbench conform --engine) gives these on every step.
    ({"workload": "uniform", "num_requests": 32, "input_len": 256, "min_len": 32, "output_len": 64,
      "shared_prefix": 256, "prefix_groups": 4, "pool_tokens": 65536}, 160, 512),
    ({"workload": "fixed", "num_requests": 16, "input_len": 64, "output_len": 128, "shared_prefix": 512,
      "pool_tokens": 65536}, 128, 512),
])
def test_the_fidelity_review_workloads(args, hits, peak_used):
    s = _figures({**args, "page_size": 16})
    assert s["prefix_hit_tokens"] == hits and s["peak_pages_used"] == peak_used
