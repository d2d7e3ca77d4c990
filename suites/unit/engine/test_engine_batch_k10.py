"""K10 in the engine: the batch arrays evolve by filter, merge, plan and commit only.

The engine never rebuilds its batch arrays from the request states, so breaking
any of its bookkeeping steps (a wrong filter index, a merge, a commit or a planned
extent that is missed) must make K10 fire on a normal
workload, and the unbroken engine must keep K10 at 0 on the same workloads.
"""

from __future__ import annotations

import numpy as np
import pytest

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.memory.batch import BatchArrays
from mini_engine.request import Request

# Staggered arrivals and lengths: requests join mid-batch, leave mid-batch, and
# the tight pool retracts some (under kvbench's optimistic admission estimate: SGLang's
# counts these fixed-length requests' outputs whole and would not over-admit plain decode).
CONFIGS = {
    "plain": dict(spec="none", page_size=4, pool_tokens=4096),
    "plain_tight": dict(spec="none", page_size=1, pool_tokens=150, admission="estimate"),
    "dflash": dict(spec="dflash", page_size=16, block_size=4, pool_tokens=4096),
    "eagle_swa_tight": dict(spec="eagle", page_size=1, window=16, pool_tokens=150),
}


def workload() -> list[Request]:
    return [Request(rid=i, prompt=[(7 * i + j) % 50 + 1 for j in range(10 + 5 * (i % 4))],
                    max_new_tokens=30 + 17 * (i % 4), arrival_step=2 * (i // 3)) for i in range(12)]


def run(name: str, audit: str = "record"):
    cfg = EngineConfig(max_running=6, audit=audit, **CONFIGS[name])
    return Engine(cfg).run(workload())


@pytest.fixture(params=sorted(CONFIGS))
def config(request):
    return request.param


def test_clean_engine_keeps_k10_at_zero(config):
    result = run(config)
    assert result.verdict == "ok", result.violation_samples
    assert result.violations == {}
    assert result.stats["decode_steps"] > 0


def test_the_workload_filters_and_merges(config, monkeypatch):
    # Guard for the tests below: the workload really exercises both paths.
    calls = {"filter": 0, "merge": 0, "commit": 0}
    for op in calls:
        orig = getattr(BatchArrays, op)

        def counted(self, *args, _op=op, _orig=orig):
            calls[_op] += 1
            return _orig(self, *args)
        monkeypatch.setattr(BatchArrays, op, counted)
    result = run(config)
    assert result.violations == {}
    assert calls["filter"] > 0 and calls["merge"] > 1 and calls["commit"] > 0
    assert (result.stats["retractions"] > 0) == config.endswith("_tight")


def _k10(result) -> int:
    return result.violations.get("K10", 0)


def test_wrong_filter_index_fires_k10(config, monkeypatch):
    orig = BatchArrays.filter

    def stale(self, keep):
        # Keep a request that left in place of the last one that stays.
        keep = list(keep)
        gone = [i for i in range(len(self)) if i not in keep]
        if keep and gone:
            keep[-1] = gone[0]
        orig(self, keep)
    monkeypatch.setattr(BatchArrays, "filter", stale)
    assert _k10(run(config)) > 0


def test_missed_merge_fires_k10(config, monkeypatch):
    monkeypatch.setattr(BatchArrays, "merge", lambda self, other: None)
    result = run(config)
    assert _k10(result) > 0
    assert any(v["values"].get("reason") == "decoding but not in the batch" for v in result.violation_samples)


def test_missed_commit_fires_k10(config, monkeypatch):
    monkeypatch.setattr(BatchArrays, "commit", lambda self, counts: None)
    assert _k10(run(config)) > 0


@pytest.mark.parametrize("config", ["dflash", "eagle_swa_tight"])  # plain decode commits 1 each
def test_commit_counts_in_the_wrong_order_fire_k10(config, monkeypatch):
    orig = BatchArrays.commit
    monkeypatch.setattr(BatchArrays, "commit", lambda self, counts: orig(self, np.asarray(counts)[::-1].copy()))
    assert _k10(run(config)) > 0


def test_skipped_extent_write_fires_k10(config, monkeypatch):
    monkeypatch.setattr(BatchArrays, "set_allocated", lambda self, extents: None)
    assert _k10(run(config)) > 0


def test_raise_mode_stops_at_a_broken_commit(monkeypatch):
    monkeypatch.setattr(BatchArrays, "commit", lambda self, counts: None)
    result = run("dflash", audit="raise")
    assert result.verdict == "violated" and result.error.startswith("InvariantViolation") and "K10" in result.error
