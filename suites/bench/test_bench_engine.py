"""Accounting-only engine throughput: nano-vllm's workload (256 requests, input and
output uniform in 100..1024), ps 16, DFLASH block 16, the `none` backend.

The throughput is pytest-benchmark's own figure: one round is one engine step, so
its ops/s column is engine steps per second (what `pytest-benchmark compare` shows
and compares). One round per step of a whole run covers prefill and decode steps in
their real proportion; output tokens per step is deterministic (extra_info), so
output tokens/s = ops/s x that. This is the speed of the bookkeeping, not a serving
figure: no model runs. Only deterministic counters are asserted.
"""

from __future__ import annotations

import pytest

from harness.core.workloads import WorkloadConfig, make_requests
from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine, StepOutcome

pytestmark = [pytest.mark.bench, pytest.mark.slow, pytest.mark.benchmark(group="engine")]

CASES = {
    "dflash-bs16": dict(spec="dflash", block_size=16),
    "plain": dict(spec="none"),
    "eagle-chain": dict(spec="eagle", topk=1, steps=3, num_draft_tokens=4),
}


class Stepper:
    """A running engine; one call is one step, and a drained engine starts the workload again."""

    def __init__(self, cfg: EngineConfig, wl: WorkloadConfig):
        self.cfg, self.wl = cfg, wl
        self.fresh()

    def fresh(self) -> None:
        self.engine = Engine(self.cfg)
        self.engine.submit(make_requests(self.wl, self.cfg.seed))

    def setup(self):
        if not self.engine.sched.has_work():  # outside the timed region
            self.fresh()
        return (), {}

    def step(self) -> None:
        assert self.engine.tick() is not StepOutcome.EXHAUSTED  # never an exhausted pool on this workload


@pytest.mark.parametrize("audit", ["record", "off"])
@pytest.mark.parametrize("case", list(CASES))
def test_engine_step_rate(benchmark, case, audit):
    cfg = EngineConfig(page_size=16, audit=audit, seed=0, **CASES[case])
    wl = WorkloadConfig()  # nano-vllm's shape
    result = Engine(cfg).run(make_requests(wl, cfg.seed))  # the counters, from one whole run
    s = result.stats
    assert result.verdict == "ok" and s["finished_requests"] == 256
    assert s["leaked_pages"] == 0 and s["violations"] == 0 and s["syncs"] == 0
    stepper = Stepper(cfg, wl)
    benchmark.extra_info.update(steps_per_run=s["steps"], output_tokens_per_step=s["output_tokens"] / s["steps"],
                                tau=s["tau"], unit="ops = engine steps/s (accounting only)")
    benchmark.pedantic(stepper.step, setup=stepper.setup, rounds=s["steps"], iterations=1, warmup_rounds=0)
