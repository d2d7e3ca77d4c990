"""Whole runs: retraction, PD arrivals and the evict floor, pool exhaustion by leaks."""

from __future__ import annotations

import pytest

from harness.core.errors import UsageError
from harness.core.workloads import WorkloadConfig, make_requests
from harness.run.runner import run_config
from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.errors import ConfigError
from mini_engine.request import Request


def test_retraction_changes_no_output():
    base = dict(spec="dflash", page_size=16, block_size=8, workload="uniform", num_requests=32,
                input_len=400, output_len=300, min_len=20, seed=11,
                admission="estimate")  # kvbench's optimistic estimate: the tight pool retracts
    roomy = run_config(dict(base, pool_tokens=1 << 16), outputs=True)
    tight = run_config(dict(base, pool_tokens=1024), outputs=True)  # one request needs ~720 tokens
    assert roomy["metrics"]["retractions"] == 0
    assert tight["metrics"]["retractions"] > 0
    assert tight["status"] == roomy["status"] == "ok"
    assert tight["outputs"] == roomy["outputs"]
    assert all(len(o["output"]) == r.max_new_tokens for o, r in
               zip(tight["outputs"], make_requests(WorkloadConfig(**{k: v for k, v in base.items()
                                                                    if k in WorkloadConfig.option_names()}), 11)))
    assert tight["metrics"]["leaked_pages"] == 0 and tight["violations"] == {}


@pytest.mark.parametrize("spec", ["none", "eagle", "dflash"])
def test_plain_decode_retraction(spec):
    # Long outputs on a pool of ~1.3 requests: kvbench's estimate is optimistic, decode retracts.
    opts = dict(spec=spec, page_size=1, workload="uniform", min_len=5, num_requests=24, input_len=100,
                output_len=300, pool_tokens=400, max_running=24, admission="estimate")
    row = run_config(opts)
    assert row["status"] == "ok" and row["metrics"]["retractions"] > 0
    wl = WorkloadConfig(**{k: v for k, v in opts.items() if k in WorkloadConfig.option_names()})
    assert row["metrics"]["output_tokens"] == sum(r.max_new_tokens for r in make_requests(wl, 0))


def test_pd_arrivals_decode_clean():
    row = run_config(dict(spec="dflash", page_size=16, window=32, workload="pd", num_requests=12,
                          pd_fraction=0.5, arrival_gap=3, input_len=300, output_len=100, pool_tokens=4096))
    assert row["status"] == "ok", row["violation_samples"]
    assert 0 < row["metrics"]["pd_arrivals"] < 12
    assert row["metrics"]["leaked_pages"] == 0


def test_raise_mode_stops_at_the_first_violation():
    row = run_config(dict(spec="dflash", page_size=16, accept_len=5, workload="fixed", num_requests=4,
                          input_len=37, output_len=11, pool_tokens=4096, profile="floor-free", audit="raise"))
    assert row["status"] == "violated" and row["violations"] == {"K8": 1}
    assert row["error"].startswith("InvariantViolation: K8 violated at step 2")
    assert row["metrics"]["leaked_pages"] == row["metrics"]["predicted_leaked_pages"]


def test_bad_requests_are_bad_input():
    cfg = EngineConfig(pool_tokens=4096)
    for reqs, words in [([Request(0, [], 4)], "non-empty prompt"),
                        ([Request(0, [1], 4), Request(0, [2], 4)], "appears twice"),
                        ([Request(0, [1, 2], 4, fill_len=1)], "fill_len must be 0 or the prompt length 2")]:
        with pytest.raises(ConfigError, match=words):
            Engine(cfg).run(reqs)


def test_leaks_exhaust_the_pool_and_the_run_stops():
    # ps 64, extent 74 at release: 74 // 64 = 1 page back, 1 leaked per request;
    # 20 pages cannot serve 40 requests.
    row = run_config(dict(spec="dflash", page_size=64, block_size=16, accept_len=5, workload="fixed",
                          num_requests=40, input_len=37, output_len=11, pool_tokens=64 * 20,
                          policy="unaligned", free_policy="floor", max_running=4))
    m = row["metrics"]
    assert row["status"] == "pool_exhausted"
    assert "pool exhausted" in row["error"]
    assert 0 < m["finished_requests"] < 40
    assert m["leaked_pages"] == m["predicted_leaked_pages"] >= 18
    same = run_config(dict(spec="dflash", page_size=64, block_size=16, accept_len=5, workload="fixed",
                           num_requests=40, input_len=37, output_len=11, pool_tokens=64 * 20,
                           policy="unaligned", free_policy="dedup", max_running=4))
    assert same["metrics"]["finished_requests"] == 40 and same["metrics"]["leaked_pages"] == 0


@pytest.mark.parametrize("options, error, words", [
    (dict(pool_tokens=512, workload="fixed", input_len=500, output_len=100), ConfigError, "too small for one request"),
    (dict(max_context=256, workload="fixed", input_len=200, output_len=100), ConfigError,
     "max_context=256 is below request 0"),
    (dict(spec="dflash", topk=2), ConfigError, "topk applies to spec=eagle only"),
    # The harness refuses a key that is neither an engine nor a workload option: its own error.
    (dict(page_sise=16), UsageError, "unknown option 'page_sise'"),
])
def test_bad_configs_raise(options, error, words):
    with pytest.raises(error, match=words):
        run_config(options)


def test_backend_crash_is_a_failed_row(monkeypatch):
    from mini_engine.forward import accounting as simulated

    def boom(self, reqs):
        raise RuntimeError("forward exploded")

    monkeypatch.setattr(simulated.SimulatedBackend, "decode", boom)
    row = run_config(dict(workload="fixed", num_requests=2, input_len=8, output_len=4))
    assert row["status"] == "failed" and "forward exploded" in row["error"]


def test_k9_counts_once_per_request_and_step(monkeypatch):
    from mini_engine.memory import sizing

    # A bound that drops the page of slack: below the exact compact length on the saw-tooth.
    monkeypatch.setattr(sizing, "compact_draft_bound", lambda n, dw, ps: min(n, dw))
    cfg = EngineConfig(spec="dflash", block_size=4, accept_len=3, draft_window=20, page_size=16, pool_tokens=4096)
    engine = Engine(cfg)
    result = engine.run([Request(rid=i, prompt=list(range(30)), max_new_tokens=60) for i in range(2)])
    k9 = [(v.rid, v.step) for v in engine.auditor.records if v.id == "K9"]
    assert result.violations["K9"] == len(k9) > 0
    assert len(set(k9)) == len(k9)
    assert result.stats["peak_compact_draft_len"] == 20 + 15  # the saw-tooth peak: window + ps - 1


@pytest.mark.parametrize("call", ["decode", "prefill", "transfer", "spec_step"])
def test_backend_short_of_results_is_a_failed_row(monkeypatch, call):
    from mini_engine.forward import accounting as simulated

    real = getattr(simulated.SimulatedBackend, call)
    monkeypatch.setattr(simulated.SimulatedBackend, call, lambda self, reqs, *a: real(self, reqs, *a)[:-1])
    row = run_config(dict(workload="pd", pd_fraction=0.5, num_requests=4, input_len=8, output_len=4, min_len=2,
                          spec="dflash" if call == "spec_step" else "none"))
    assert row["status"] == "failed" and "results for a batch of" in row["error"]


@pytest.mark.parametrize("spec", ["none", "dflash"])
def test_a_finished_engine_is_freed_without_a_garbage_collection(spec):
    """No reference cycle keeps a run's pools alive: a sweep worker runs config after
    config, and pools held until a full collection grew it by each run's KV."""
    import gc
    import weakref

    cfg = EngineConfig(spec=spec, window=64)
    wl = WorkloadConfig(workload="pd", num_requests=4, input_len=32, output_len=8, min_len=8)
    engine = Engine(cfg)
    engine.run(make_requests(wl, cfg.seed, max_context=cfg.max_context))
    alive = [weakref.ref(engine), weakref.ref(engine.manager), weakref.ref(engine.sched)]
    gc.disable()
    try:
        del engine
        assert [r() is None for r in alive] == [True, True, True]
    finally:
        gc.enable()
