"""SGLang's min-free-slots admission delay (mini_engine/scheduler/admission_delay.py) on worked numbers.

SGLang resolves the threshold from max_running_requests for the DFLASH family
(resolve_min_free_slots without a user value): none below 8, else
min(4, max(2, (max_running + 5) // 6)). A pass without a chunked request admits no fresh
request while requests run and fewer than that many slots are free.

The case: DFLASH, every verify accepting 4 tokens, max_running 16, a pool that holds
everything. Sixteen requests start together; request i has 4 * (i + 1) outputs, so one
finishes per step from the first decode step on. Four more wait. Threshold
(16 + 5) // 6 = 3: with one or two slots free nothing joins; the pass that sees three
free admits three at once (requests 16, 17, 18), then the last one waits for three free
slots again.
"""

from __future__ import annotations

import pytest

from mini_engine.scheduler.admission_delay import delayed, min_free_slots
from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.request import Request


@pytest.mark.parametrize("max_running, want", [(7, None), (8, 2), (11, 2), (12, 2), (13, 3), (16, 3), (19, 4),
                                               (256, 4)])
def test_threshold_from_max_running(max_running, want):
    assert min_free_slots(max_running, True) == want
    assert min_free_slots(max_running, False) is None  # other algorithms: off unless asked


def test_the_delay_needs_running_requests():
    assert delayed(3, running_bs=15, allocatable=1) and delayed(3, running_bs=14, allocatable=2)
    assert not delayed(3, running_bs=13, allocatable=3)
    assert not delayed(3, running_bs=0, allocatable=0)  # an empty engine admits
    assert not delayed(None, running_bs=15, allocatable=1)


def _engine(profile: str = "sglang-0.5.23") -> tuple[Engine, list[Request]]:
    cfg = EngineConfig(spec="dflash", block_size=16, accept_len=4, page_size=16, pool_tokens=4096 * 16,
                       max_running=16, max_context=512, overlap=False, audit="raise", profile=profile)
    reqs = [Request(rid=i, prompt=[100 + i] * 32, max_new_tokens=4 * (i + 1)) for i in range(16)]
    reqs += [Request(rid=16 + i, prompt=[200 + i] * 32, max_new_tokens=8) for i in range(4)]
    return Engine(cfg), reqs


def _joins(profile: str) -> list[list[int]]:
    """The fresh requests each prefill pass admitted, in order."""
    engine, reqs = _engine(profile)
    engine.submit(reqs)
    seen, joins = set(), []
    while engine.sched.has_work():
        engine.tick()
        new = [r.rid for r in engine.sched.running if r.rid not in seen]
        seen.update(new)
        if new:
            joins.append(new)
    assert all(r.remaining == 0 for r in reqs)
    return joins


@pytest.mark.parametrize("profile", ["sglang-0.5.23", "sglang-pre-35265"])  # 0.5.18 has the same delayer
def test_fresh_requests_join_three_at_once(profile):
    joins = _joins(profile)
    assert joins == [list(range(16)), [16, 17, 18], [19]]


def test_the_designs_admit_one_per_free_slot():
    # kvbench's estimate (host-aligned keeps it) has no such delay: each freed slot is taken.
    joins = _joins("host-aligned")
    assert joins[0] == list(range(16)) and [16] in joins
