"""A PD caller that bypasses the SWA evict floor (the ``bypass_evict_floor`` fixture):
K6 fires at the write, in the memory layer, a whole engine run and a harness row.

DESIGN.md: ps 16, window 32, fill_len 50 -> tail 34, cursor 16; the bypass writes 18.
"""

from __future__ import annotations

import pytest

from harness.run.runner import run_config
from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.errors import EvictFloorError
from mini_engine.memory.audit.record import Auditor
from mini_engine.memory.config import MemoryConfig
from mini_engine.memory.manager import KVManager
from mini_engine.request import Request


def make(mode: str) -> tuple[KVManager, Auditor]:
    mem = MemoryConfig(16, 64, 4, 400, policy="aligned", free_policy="floor", prefix_cache="chunk",
                       swa_num_pages=64, window=32)
    aud = Auditor(mode)
    return KVManager(mem, aud), aud


def pd_requests(n: int, first: int = 0) -> list[Request]:
    return [Request(rid=first + i, prompt=list(range(50)), max_new_tokens=20, fill_len=50) for i in range(n)]


def test_bypassing_caller_fires_at_the_write(bypass_evict_floor):
    m, aud = make("raise")
    s = m.admit("pd")
    free = (m.num_free_pages, m.swa.allocator.num_free_pages)
    with pytest.raises(EvictFloorError) as err:
        m.pd_prealloc(s, 50)
    e = err.value
    assert (e.value, e.previous, e.page_size) == (18, 0, 16)
    assert e.context == {"fill_len": 50, "window": 32}
    # It fired at the cursor write: nothing was allocated after it.
    assert (m.num_free_pages, m.swa.allocator.num_free_pages) == free and s.allocated == 0
    assert aud.counts == {"K6": 1}


def test_bypass_in_record_mode_records_and_floors(bypass_evict_floor):
    m, aud = make("record")
    s = m.admit("pd")
    assert m.pd_prealloc(s, 50)
    assert aud.counts == {"K6": 1}
    v = aud.records[0]
    assert v.values["value"] == 18 and v.rid == "pd"
    assert s.swa_evicted == 16
    assert m.check(1) == []


def test_bypass_without_auditor_raises(bypass_evict_floor):
    mem = MemoryConfig(16, 64, 4, 400, swa_num_pages=64, window=32, prefix_cache="chunk")
    m = KVManager(mem)
    with pytest.raises(EvictFloorError):
        m.pd_prealloc(m.admit(0), 50)


def test_pd_bypass_fires_k6_with_values_and_run_goes_on(bypass_evict_floor):
    cfg = EngineConfig(spec="dflash", page_size=16, window=32, pool_tokens=8192, audit="record")
    result = Engine(cfg).run(pd_requests(3))
    assert result.violations["K6"] == 3
    k6 = [v for v in result.violation_samples if v["id"] == "K6"][0]
    assert k6["values"]["value"] == 18 and k6["values"]["fill_len"] == 50 and k6["values"]["window"] == 32
    assert result.verdict == "violated"
    assert all(len(o) == 20 for o in result.outputs.values())  # record mode counts it and goes on


def test_the_same_pd_run_without_the_bypass_is_clean():
    cfg = EngineConfig(spec="dflash", page_size=16, window=32, pool_tokens=8192, audit="record")
    clean = Engine(cfg).run(pd_requests(3))
    assert clean.verdict == "ok" and clean.violations == {}


def test_pd_bypass_raise_mode_stops_at_the_write(bypass_evict_floor):
    cfg = EngineConfig(spec="dflash", page_size=16, window=32, pool_tokens=8192, audit="raise")
    result = Engine(cfg).run(pd_requests(1, first=7))
    assert result.verdict == "violated"
    assert "swa_evicted_seqlen=18" in result.error and "request 7" in result.error
    assert result.stats["leaked_pages"] == 0  # stopped runs are drained before measuring


def test_pd_bypass_through_the_harness_is_a_violated_row(bypass_evict_floor):
    options = dict(spec="dflash", page_size=16, window=32, workload="pd", pd_fraction=1.0, num_requests=4,
                   input_len=50, output_len=20, min_len=50, pool_tokens=8192)
    row = run_config(options)
    assert row["status"] == "violated" and row["violations"]["K6"] == row["metrics"]["pd_arrivals"] > 0
    assert row["metrics"]["leaked_pages"] == 0
