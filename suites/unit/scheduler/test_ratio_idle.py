"""The new-token ratio is back at its start once the scheduler idles (an arrival gap).

SGLang's Scheduler.on_idle calls NewTokenRatioTracker.reset() when its loop finds no
batch to run and nothing waits, runs or is in flight (is_fully_idle; both 0.5.18 and
0.5.23); 0.5.18's adder counts the decoding
requests' outputs at that ratio (mini_engine/scheduler/prefill_adder.py). Worked case: one request
of 8 prompt and 10 output tokens decodes 9 steps (the ratio decays from 0.7 by
0.7 x 0.86 / 600 per step); the next arrives at step 100, after a gap: it is admitted at 0.7.
"""

from __future__ import annotations

import pytest

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.request import Request


@pytest.mark.parametrize("profile, retraction, reset", [
    ("sglang-0.5.23", None, True), ("sglang-pre-35265", None, True),
    ("sglang-0.5.23", "newest", False)])  # kvbench's own rule keeps its ratio
def test_the_ratio_resets_after_an_arrival_gap(profile, retraction, reset):
    knobs = {"retraction": retraction} if retraction else {}
    eng = Engine(EngineConfig(profile=profile, page_size=16, overlap="off", **knobs))
    seen = []
    admit = eng.sched.admit

    def recording():
        seen.append((eng.step_no, eng.sched.ratio))
        return admit()

    eng.sched.admit = recording
    eng.submit([Request(0, list(range(8)), 10), Request(1, list(range(100, 108)), 10, arrival_step=100)])
    assert eng.run().verdict == "ok"
    init = eng.sched.rules.init
    before_gap = [r for s, r in seen if s < 100][-1]
    at_arrival = next(r for s, r in seen if s >= 100)
    assert before_gap < init  # it decayed while the first request decoded
    assert (at_arrival == init) is reset
    if not reset:
        assert at_arrival <= before_gap
