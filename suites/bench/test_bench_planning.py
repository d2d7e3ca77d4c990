"""Host planning per speculative decode step: prepare (reservation + allocation) + commit.

One round is one planning step of n requests, so pytest-benchmark's ops/s is the
throughput: planned decode steps per second. Timings are reported, never gated;
what is asserted is deterministic: no syncs, no stranded slots under the aligned
policy, extents as the formula says.
Run: python -m pytest -n 0 suites/bench/test_bench_planning.py --benchmark-only
"""

from __future__ import annotations

import pytest

from mini_engine.memory import Auditor, KVManager, MemoryConfig
from mini_engine.memory.sizing import dflash_reserve, plan_extent, row_width

PS = 16
BLOCK = 16
RESERVE = dflash_reserve(BLOCK)
MAX_CTX = 1024
PROMPT = 100


class Planner:
    """n requests in decode; one call = one step of host planning."""

    def __init__(self, n: int, policy: str):
        width = row_width(MAX_CTX, RESERVE, PS, True)
        self.mem = MemoryConfig(PS, n * -(-width // PS), n, width, policy=policy)
        self.n = n
        self.reset()

    def reset(self) -> None:
        self.m = KVManager(self.mem, Auditor("off"))
        self.states = [self.m.admit(i) for i in range(self.n)]
        for s in self.states:
            assert self.m.extend(s, PROMPT)
            self.m.commit(s, PROMPT)
        self.step = 0

    def setup(self):
        # Start over (outside the timed region) before a request would outgrow its row.
        if self.states[0].committed + 2 * BLOCK > MAX_CTX:
            self.reset()
        return (), {}

    def plan_step(self) -> None:
        assert self.m.prepare(self.states, RESERVE)
        for i, s in enumerate(self.states):
            self.m.commit(s, 1 + (i + self.step) % BLOCK)  # accepted length, bonus included
        self.step += 1


@pytest.mark.bench
@pytest.mark.benchmark(group="planning")
@pytest.mark.parametrize("policy", ["aligned", "unaligned"])
@pytest.mark.parametrize("n", [1, 64, 256, 1024])
def test_bench_host_planning_per_step(benchmark, n, policy):
    p = Planner(n, policy)
    benchmark.extra_info.update({"requests": n, "policy": policy, "page_size": PS, "reserve": RESERVE})
    benchmark.pedantic(p.plan_step, setup=p.setup, rounds=60 if n >= 256 else 200, iterations=1,
                       warmup_rounds=2)
    assert p.m.syncs == 0
    if policy == "aligned":
        assert p.m.stranded_slots == 0
    # The last step's extents as the formula gives them from its committed lengths (the
    # lengths grow every step, so the rule's "never below" floor never decides here).
    assert [s.allocated for s in p.states] == [plan_extent(0, s.reserve_base, RESERVE, PS, policy) for s in p.states]
    assert all(s.allocated >= s.committed for s in p.states)
