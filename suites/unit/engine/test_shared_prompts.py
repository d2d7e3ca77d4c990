"""Shared prompts: prefix groups (harness/core/prefixes.py) and multi-turn sessions (harness/core/turns.py,
mini_engine/scheduler/sessions.py)."""

from __future__ import annotations

import pytest

from harness.core.errors import UsageError
from harness.core.workloads import WorkloadConfig, make_workload
from harness.run.runner import run_config
from mini_engine.config.engine_config import EngineConfig
from mini_engine.errors import ConfigError
from mini_engine.request import Status
from mini_engine.scheduler.sessions import SessionEngine, engine_for

SHAPE = dict(num_requests=10, input_len=40, output_len=12, min_len=5)


def test_one_prefix_before_the_plain_workloads_prompts():
    plain = make_workload(WorkloadConfig(**SHAPE), 3).requests
    shared = make_workload(WorkloadConfig(**SHAPE, shared_prefix=32), 3).requests
    head = shared[0].prompt[:32]
    assert all(r.prompt[:32] == head for r in shared)
    # The own part is the plain workload's request, token for token: a prefix only adds shared tokens.
    assert [r.prompt[32:] for r in shared] == [r.prompt for r in plain]
    assert [r.max_new_tokens for r in shared] == [r.max_new_tokens for r in plain]


def test_groups_are_round_robin_and_share_no_first_token():
    reqs = make_workload(WorkloadConfig(**SHAPE, shared_prefix=16, prefix_groups=3), 0).requests
    heads = [tuple(r.prompt[:16]) for r in reqs]
    assert len(set(heads)) == 3
    assert all(heads[i] == heads[i % 3] for i in range(len(reqs)))
    assert [heads.count(h) for h in heads[:3]] == [4, 3, 3]
    assert len({h[0] for h in heads}) == 3  # no two groups share a node of the prefix tree
    # More groups than requests: each request its own prefix, none drawn for nothing.
    few = make_workload(WorkloadConfig(**{**SHAPE, "num_requests": 2}, shared_prefix=4, prefix_groups=9), 0)
    assert len({tuple(r.prompt[:4]) for r in few.requests}) == 2


def test_seeded():
    wl = WorkloadConfig(**SHAPE, shared_prefix=8, prefix_groups=2, turns=3)
    a, b, c = make_workload(wl, 5), make_workload(wl, 5), make_workload(wl, 6)
    assert [r.prompt for r in a.requests] == [r.prompt for r in b.requests]
    assert a.next_turns == b.next_turns
    assert a.requests[0].prompt[:8] != c.requests[0].prompt[:8]
    assert a.next_turns != c.next_turns


def test_turns_chain_each_session():
    n, turns = 4, 3
    single = make_workload(WorkloadConfig(**{**SHAPE, "num_requests": n}, shared_prefix=8), 1)
    work = make_workload(WorkloadConfig(**{**SHAPE, "num_requests": n}, shared_prefix=8, turns=turns), 1)
    # Turn 0 is the single-turn workload; turn t of session i is request t * n + i, after turn t - 1.
    assert [r.prompt for r in work.requests] == [r.prompt for r in single.requests]
    assert {prev: nxt.rid for prev, nxt in work.next_turns.items()} == {t * n + i: (t + 1) * n + i
                                                                       for t in range(turns - 1) for i in range(n)}
    assert all(5 <= len(nxt.new_tokens) <= 40 and 5 <= nxt.max_new_tokens <= 12 for nxt in work.next_turns.values())
    assert not make_workload(WorkloadConfig(**SHAPE), 1).next_turns


def test_a_turn_arrives_after_its_predecessor_finished_and_extends_it():
    wl = WorkloadConfig(**SHAPE, shared_prefix=16, prefix_groups=2, turns=3)
    cfg = EngineConfig(spec="dflash", block_size=4, page_size=16, seed=2)
    work = make_workload(wl, cfg.seed, max_context=cfg.max_context)
    engine = engine_for(cfg, work.next_turns)
    assert isinstance(engine, SessionEngine)
    engine.submit(work.requests)
    before = {r.rid: r for r in work.requests}
    prev = {nxt.rid: p for p, nxt in work.next_turns.items()}
    while engine.sched.has_work():
        engine.tick()
        by_rid = {r.rid: r for r in engine.requests}
        for rid, r in by_rid.items():
            if rid in prev:
                assert by_rid[prev[rid]].status is Status.FINISHED  # never beside its predecessor
    assert len(engine.requests) == 30 and all(r.status is Status.FINISHED for r in engine.requests)
    for rid, p in prev.items():
        r, q = by_rid[rid], by_rid[p]
        assert r.prompt == [*q.prompt, *q.outputs, *work.next_turns[p].new_tokens]
        assert r.prompt[:16] == before[rid % 10].prompt[:16]  # the session keeps its group's prefix


def test_sessions_through_retraction_give_the_same_outputs():
    base = dict(spec="dflash", page_size=16, block_size=8, num_requests=32, input_len=400, output_len=300,
                min_len=20, seed=11, shared_prefix=64, prefix_groups=2, turns=2,
                admission="estimate")  # kvbench's optimistic estimate: the tight pool retracts
    roomy = run_config(dict(base, pool_tokens=1 << 16), outputs=True)
    tight = run_config(dict(base, pool_tokens=1536), outputs=True)
    assert tight["metrics"]["retractions"] > 0 and roomy["metrics"]["retractions"] == 0
    assert tight["status"] == roomy["status"] == "ok"
    assert tight["metrics"]["finished_requests"] == 64
    assert sorted(tight["outputs"], key=lambda o: o["rid"]) == sorted(roomy["outputs"], key=lambda o: o["rid"])


def test_every_turn_is_validated_before_the_first_step():
    wl = WorkloadConfig(workload="fixed", num_requests=2, input_len=100, output_len=50, turns=3)
    work = make_workload(wl, 0)
    cfg = EngineConfig(page_size=16, pool_tokens=256)  # the first turns fit, the third does not
    with pytest.raises(ConfigError, match="request 4 needs"):
        engine_for(cfg, work.next_turns).run(work.requests)
    with pytest.raises(UsageError, match="below the last of turns=3 of session 0 .request 4.: prompt 400"):
        make_workload(wl, 0, max_context=420)


@pytest.mark.parametrize("options, words", [
    ({"prefix_groups": 0}, "prefix_groups must be an integer >= 1"),
    ({"turns": 0}, "turns must be an integer >= 1"),
    ({"shared_prefix": -1}, "shared_prefix must be an integer >= 0"),
    ({"prefix_groups": 2}, "prefix_groups=2 needs a shared_prefix >= 1"),
    ({"shared_prefix": 4, "prefix_groups": 9, "prompt_vocab": 8}, "prefix_groups must be <= prompt_vocab=8"),
    ({"prompts": "p.jsonl", "shared_prefix": 4}, "shared_prefix shapes a synthetic workload"),
])
def test_bad_sharing(options, words):
    with pytest.raises(UsageError, match=words):
        WorkloadConfig(**options)


def test_capacity_sizes_the_last_turn_after_the_prefix():
    from harness.core.turns import nominal_length

    assert nominal_length({"input_len": 50, "output_len": 20, "shared_prefix": 100, "turns": 2}) == 240
    assert nominal_length({"input_len": 50, "output_len": 20}) == 70  # a row recorded before the options
