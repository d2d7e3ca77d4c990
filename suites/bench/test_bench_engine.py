"""Accounting-only engine throughput: nano-vllm's workload (256 requests, input and
output uniform in 100..1024), ps 16, DFLASH block 16, the `none` backend.

Figures (engine steps/s, requests/s, output tokens/s, host planning per decode
step) go to extra_info; only deterministic counters are asserted.
"""

from __future__ import annotations

import pytest

from harness.workloads import WorkloadConfig, make_requests
from mini_engine.config import EngineConfig
from mini_engine.engine import Engine

pytestmark = [pytest.mark.bench, pytest.mark.slow]

CASES = {
    "dflash-bs16": dict(spec="dflash", block_size=16),
    "plain": dict(spec="none"),
    "eagle-chain": dict(spec="eagle", topk=1, steps=3, num_draft_tokens=4),
}


@pytest.mark.parametrize("audit", ["record", "off"])
@pytest.mark.parametrize("case", list(CASES))
def test_engine_throughput(benchmark, bench_mean, case, audit):
    cfg = EngineConfig(page_size=16, audit=audit, seed=0, **CASES[case])
    wl = WorkloadConfig()  # nano-vllm's shape

    def once():
        return Engine(cfg).run(make_requests(wl, cfg.seed))

    result = benchmark.pedantic(once, rounds=3, iterations=1, warmup_rounds=0)
    s = result.stats
    assert result.verdict == "ok" and s["finished_requests"] == 256
    assert s["leaked_pages"] == 0 and s["violations"] == 0 and s["syncs"] == 0
    mean = bench_mean()
    if mean is None:
        return
    benchmark.extra_info.update(
        steps=s["steps"], steps_per_s=s["steps"] / mean, requests_per_s=256 / mean,
        output_tokens_per_s=s["output_tokens"] / mean, tau=s["tau"],
        plan_us_per_decode_step=s["plan_us_per_decode_step"],
    )
