"""The min-free-slots admission delay against SGLang's own MinFreeSlotsDelayer, side by side.

SGLang's managers/min_free_slots_delayer.py (the same in 0.5.23 and 0.5.18) is imported
as it is: its resolve_min_free_slots against mini_engine.scheduler.admission_delay.min_free_slots
over max_running and the algorithm, and, through a DFLASH engine run whose waiting
requests outnumber its free slots, every pass's verdict against SGLang's
MinFreeSlotsDelayer.should_delay given the same running batch size and allocatable count.
"""

from __future__ import annotations

import importlib

import pytest

import mini_engine.scheduler.scheduler as scheduler
from mini_engine.scheduler.admission_delay import delayed, min_free_slots
from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.request import Request


@pytest.fixture(scope="module")
def delayer(sg):  # SGLang installed, or a skip (a failure under KVBENCH_REQUIRE_SGLANG)
    return importlib.import_module("sglang.srt.managers.min_free_slots_delayer")


@pytest.mark.parametrize("dflash", [True, False])
def test_threshold_equals_sglangs(delayer, dflash):
    for max_running in range(0, 70):
        assert min_free_slots(max_running, dflash) == delayer.resolve_min_free_slots(
            None, max_running, is_dflash_family=dflash), max_running


@pytest.mark.parametrize("max_running", [8, 16, 30])
def test_every_pass_delays_as_sglang_does(delayer, monkeypatch, max_running):
    calls = []

    def recorded(threshold, running_bs, allocatable):
        got = delayed(threshold, running_bs, allocatable)
        calls.append((threshold, running_bs, allocatable, got))
        return got

    monkeypatch.setattr(scheduler, "delayed", recorded)
    cfg = EngineConfig(spec="dflash", block_size=16, accept_len=3, page_size=16, pool_tokens=2048 * 16,
                       max_running=max_running, max_context=512, audit="raise")
    reqs = [Request(rid=i, prompt=[1 + i % 50] * (24 + i % 7), max_new_tokens=6 + (5 * i) % 23)
            for i in range(3 * max_running)]
    res = Engine(cfg).run(reqs)
    assert res.verdict == "ok", res.error
    threshold = delayer.resolve_min_free_slots(None, max_running, is_dflash_family=True)
    assert calls and {c[0] for c in calls} == {threshold}
    sglang = delayer.MinFreeSlotsDelayer(min_free_slots=threshold)
    for _, running_bs, allocatable, got in calls:
        assert got == sglang.should_delay(running_bs=running_bs, num_allocatable_reqs=allocatable)
    assert any(c[3] for c in calls) and not all(c[3] for c in calls)  # the run both waited and admitted
