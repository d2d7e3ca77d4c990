"""The engine loop around the real tiny model: speculative decoding stays lossless
(K11) through admission, chunked prefill, retraction and PD arrivals."""

from __future__ import annotations

import pytest

from harness.core.workloads import make_requests
from harness.core.run_spec import RunSpec
from harness.run.runner import run_config
from mini_engine.engine import Engine

pytestmark = pytest.mark.slow

BASE = dict(model="tiny", workload="pd", pd_fraction=0.5, num_requests=3, input_len=32, output_len=10,
            min_len=8, page_size=16, seed=3, chunked_prefill=32, pool_tokens=4096)


def _outputs(**extra) -> list[list[int]]:
    row = run_config(dict(BASE, **extra), outputs=True)
    assert row["status"] == "ok", (row["error"], row["violation_samples"][:3])
    return [o["output"] for o in row["outputs"]]


def _retracted_midway(**extra) -> tuple[list[list[int]], int]:
    """Run, retract every other decoding request after a few steps, run to the end."""
    spec = RunSpec.parse(dict(BASE, **extra))
    cfg = spec.engine
    reqs = make_requests(spec.workload, cfg.seed)
    engine = Engine(cfg)
    engine.submit(reqs)
    for _ in range(4):
        engine.tick()
    decoding = [r for r in engine.sched.running if not r.prefilling and r.outputs]
    for r in decoding[::2]:
        engine.sched.retract(r)
    result = engine.run()
    assert result.verdict == "ok", (result.error, result.violation_samples[:3])
    assert result.stats["leaked_pages"] == 0
    return [result.outputs[r.rid] for r in reqs], result.stats["retractions"]


def test_speculative_equals_plain_and_survives_retraction():
    plain = _outputs(spec="none")
    assert _outputs(spec="eagle", topk=2, steps=2, num_draft_tokens=4) == plain
    dflash, retracted = _retracted_midway(spec="dflash", block_size=4)
    assert retracted > 0
    assert dflash == plain
    again, retracted = _retracted_midway(spec="none")
    assert retracted > 0 and again == plain
