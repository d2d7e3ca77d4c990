"""The overlap_plan knob: 0.5.23 skips the requests its in-flight result finishes, 0.5.18
(sglang-pre-35265) plans every running request. Against 0.5.18's own code:
suites/unit/conform/test_sglang_0518.py."""

from __future__ import annotations

import dataclasses

import pytest

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.errors import ConfigError
from mini_engine.config.profiles import PROFILES, resolve
from mini_engine.request import Request


def _one_request(profile: str, outputs: int):
    # test_overlap's worked example: DFLASH block 16, ps 16, prompt 37, 8 accepted a step
    cfg = EngineConfig(spec="dflash", block_size=16, page_size=16, accept_len=8, pool_tokens=1 << 14,
                       max_context=512, profile=profile, prefix_cache="chunk")
    eng = Engine(cfg)
    eng.submit([Request(0, list(range(1, 38)), outputs)])
    res = eng.run()
    assert res.verdict == "ok" and res.stats["leaked_pages"] == 0
    return res.stats


def test_pre_35265_is_0518():
    p = resolve("sglang-pre-35265")
    assert p.overlap_plan == "every-running" and p.free == "unique-row" and p.overlap
    assert PROFILES["sglang-0.5.23"].overlap_plan == "skip-finishing"


@pytest.mark.parametrize("outputs, extra_0523, extra_0518", [(18, 0, 1), (17, 1, 1)])
def test_one_output_short_is_planned_only_by_0518(outputs, extra_0523, extra_0518):
    # 18 outputs: 1 + 8 + 8 leaves the last step one output short, which 0.5.23 leaves out
    # of the plan and 0.5.18 reserves for (8 slots, freed when the result lands).
    # 17: the last step's result overshoots, both plan the request once more.
    assert _one_request("sglang-0.5.23", outputs)["overlap_extra_reservations"] == extra_0523
    assert _one_request("sglang-pre-35265", outputs)["overlap_extra_reservations"] == extra_0518


def test_pre_35265_release_pays_its_syncs():
    assert _one_request("sglang-pre-35265", 18)["release_syncs"] == 1
    assert _one_request("sglang-0.5.23", 18)["release_syncs"] == 0


def test_bad_overlap_plan_is_one_line():
    with pytest.raises(ConfigError) as err:
        dataclasses.replace(PROFILES["sglang-0.5.23"], overlap_plan="sometimes")
    assert "overlap_plan" in str(err.value) and "\n" not in str(err.value)
