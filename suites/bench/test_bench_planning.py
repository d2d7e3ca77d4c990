"""Host planning per speculative decode step: prepare (reservation + allocation) + commit,
and one engine decode step's whole host plan beside SGLang 0.5.23's (test_bench_decode_plan_vs_sglang).

One round is one planning step of n requests, so pytest-benchmark's ops/s is the
throughput: planned decode steps per second. Timings are reported, never gated;
what is asserted is deterministic: no syncs, no stranded slots under the aligned
policy, extents as the formula says.
Run: python -m pytest -n 0 suites/bench/test_bench_planning.py --benchmark-only
(add -s to see the side-by-side figures and their ratios: of the two benchmarks' own
rounds, and of the two paths measured again in alternating blocks).
"""

from __future__ import annotations

import numpy as np
import pytest

from mini_engine.memory.audit.record import Auditor
from mini_engine.memory.config import MemoryConfig
from mini_engine.memory.manager import KVManager
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
    assert [s.allocated for s in p.states] == [plan_extent(0, int(p.m.reserve_base[s.row]), RESERVE, PS, policy)
                                                   for s in p.states]
    assert all(s.allocated >= s.committed for s in p.states)


# -- one engine decode step's host planning beside SGLang 0.5.23's --------------------
#
# kvbench: plan_us_per_decode_step of a real Engine (accounting only, audit off) with
# N_RUNNING requests all decoding, DFLASH block 16, ps 16: the fit check and retraction,
# SWA eviction, the reservation and allocation with its req_to_token write, the batch
# arrays. Its result processing (commits, output tokens, finishes:
# result_us_per_decode_step) is reported beside it, and plan + result against SGLang's
# path too, though SGLang's side times no result processing. The backend returns fixed accepted
# lengths, so a round is the engine's own step and little else. SGLang: the host path
# of its DFLASH prepare on CPU, page_aligned_decode_alloc_lens + the tensors
# PagedTokenToKVPoolAllocator.alloc_extend takes (last_loc from req_to_token, as
# get_last_loc_torch) + alloc_extend; its req_to_token write and commits run outside the
# timed region. Both see the same accepted lengths.
# Run: python -m pytest -n 0 -s suites/bench/test_bench_planning.py -k vs_sglang --benchmark-only

N_RUNNING = 256
SIDE_PROMPT = 128
SIDE_MAX_NEW = 3000
_side: dict[str, float] = {}


def accepted(i: int, step: int) -> int:
    return 1 + (i + step) % BLOCK  # bonus included, mean 8.5 of 16


class FixedAcceptance:
    """A backend that writes no KV and accepts accepted(i, step) tokens for batch position i."""

    def __init__(self):
        self.step = 0

    reads = frozenset()
    mirror = None

    def setup(self, layout) -> None:
        pass

    def forward(self, batch):
        from mini_engine.forward.step_batch import Phase

        calls = {Phase.PREFILL: lambda: self.prefill(batch.reqs, batch.starts, batch.ends),
                 Phase.DECODE: lambda: self.decode(batch.reqs), Phase.VERIFY: lambda: self.spec_step(batch.reqs),
                 Phase.TRANSFER: lambda: self.transfer(batch.reqs)}
        return calls[batch.phase]()

    def prefill(self, reqs, starts, ends):
        return [1 if e == r.prefill_target else None for r, e in zip(reqs, ends)]

    def decode(self, reqs):
        return [1] * len(reqs)

    def spec_step(self, reqs):
        self.step += 1
        return [[1] * accepted(i, self.step) for i in range(len(reqs))]

    def transfer(self, reqs):
        return [1] * len(reqs)

    def release(self, req) -> None:
        pass


class EngineSide:
    """An Engine with N_RUNNING requests in decode; one call = one decode step."""

    def __init__(self):
        from mini_engine.config.engine_config import EngineConfig
        from mini_engine.request import Request

        self.cfg = EngineConfig(page_size=PS, spec="dflash", block_size=BLOCK, audit="off",
                                max_running=N_RUNNING, max_context=SIDE_PROMPT + SIDE_MAX_NEW,
                                pool_tokens=N_RUNNING * (SIDE_PROMPT + SIDE_MAX_NEW + 4 * RESERVE))
        self.Request = Request
        self.plan_s: list[float] = []  # the engine's own planning time of each timed step
        self.result_s: list[float] = []  # and its result processing's
        self.fresh()

    def fresh(self) -> None:
        from mini_engine.engine import Engine

        self.engine = Engine(self.cfg, FixedAcceptance())
        self.engine.submit([self.Request(rid=i, prompt=[1] * SIDE_PROMPT, max_new_tokens=SIDE_MAX_NEW)
                            for i in range(N_RUNNING)])
        while self.engine.stats.decode_steps == 0:  # prefill everyone (outside the timed region)
            assert self.engine.tick()
        self.engine.stats.plan_s, self.engine.stats.decode_steps = 0.0, 0

    def setup(self):
        if max(len(r.outputs) for r in self.engine.sched.running) + 2 * BLOCK >= SIDE_MAX_NEW:
            self.fresh()
        return (), {}

    def step(self) -> None:
        stats = self.engine.stats
        before, before_result = stats.plan_s, stats.result_s
        assert self.engine.tick()
        self.plan_s.append(stats.plan_s - before)
        self.result_s.append(stats.result_s - before_result)
        assert len(self.engine.sched.running) == N_RUNNING


class SGLangSide:
    """SGLang 0.5.23's DFLASH decode allocation on CPU for N_RUNNING requests; one call = one step."""

    def __init__(self, sg_sizing, sg_paged, torch):
        from types import SimpleNamespace

        self.sizing, self.torch = sg_sizing, torch
        width = SIDE_PROMPT + SIDE_MAX_NEW + 4 * RESERVE
        self.alloc = sg_paged.PagedTokenToKVPoolAllocator(N_RUNNING * width, PS, torch.int64, "cpu", None, False)
        self.req_to_token = torch.zeros((N_RUNNING, width), dtype=torch.int64)
        self.pool_idx = torch.arange(N_RUNNING, dtype=torch.int64)
        self.reqs = [SimpleNamespace(kv=SimpleNamespace(kv_allocated_len=0, kv_committed_len=SIDE_PROMPT))
                     for _ in range(N_RUNNING)]
        got = self.alloc.alloc_extend(*self._extend_args([0] * N_RUNNING, [SIDE_PROMPT] * N_RUNNING))
        self._record([0] * N_RUNNING, [SIDE_PROMPT] * N_RUNNING, got)
        self.pending = None
        self.step_no = 0

    def _extend_args(self, cur, nxt):
        t = self.torch
        c, x = t.tensor(cur, dtype=t.int64), t.tensor(nxt, dtype=t.int64)
        last = t.where(c > 0, self.req_to_token[self.pool_idx, (c - 1).clamp(min=0)], t.full_like(c, -1))
        return c, c, x, x, last, int(sum(nxt) - sum(cur))

    def _record(self, cur, nxt, out) -> None:
        off = 0
        for i, (a, b) in enumerate(zip(cur, nxt)):
            self.req_to_token[i, a:b] = out[off : off + b - a]
            off += b - a
            self.reqs[i].kv.kv_allocated_len = max(self.reqs[i].kv.kv_allocated_len, b)

    def setup(self):
        if self.pending is not None:  # the previous step's req_to_token write and commits
            self._record(*self.pending)
            self.step_no += 1
            for i, r in enumerate(self.reqs):
                r.kv.kv_committed_len += accepted(i, self.step_no)
            self.pending = None
        if self.reqs[0].kv.kv_committed_len + 2 * RESERVE >= SIDE_PROMPT + SIDE_MAX_NEW:
            self.__init__(self.sizing, __import__("sglang.srt.mem_cache.allocator.paged", fromlist=["x"]), self.torch)
        return (), {}

    def step(self) -> None:
        cur, nxt, need = self.sizing.page_aligned_decode_alloc_lens(self.reqs, reserve=RESERVE, page_size=PS)
        out = None
        if need:
            out = self.alloc.alloc_extend(*self._extend_args(cur, nxt))
            assert out is not None
        self.pending = (cur, nxt, out)


def interleaved(k: EngineSide, g: SGLangSide, blocks: int = 10, steps: int = 20) -> tuple[float, float, float]:
    """Median step times (us) of both sides measured in alternating blocks, so a load that
    comes and goes on a shared machine weighs on both alike (the first steps of a block are
    not counted: either side may start it cold): kvbench's plan, kvbench's plan + result
    processing, SGLang's path."""
    import time

    ks: list[float] = []
    kr: list[float] = []
    gs: list[float] = []
    for _ in range(blocks):
        k.plan_s.clear()
        k.result_s.clear()
        for _ in range(steps):
            k.setup()
            k.step()
        ks += k.plan_s[3:]
        kr += [p + r for p, r in zip(k.plan_s[3:], k.result_s[3:])]
        for i in range(steps):
            g.setup()
            t = time.perf_counter()
            g.step()
            if i >= 3:
                gs.append(time.perf_counter() - t)
    return float(np.median(ks)) * 1e6, float(np.median(kr)) * 1e6, float(np.median(gs)) * 1e6


@pytest.mark.bench
@pytest.mark.benchmark(group="plan-vs-sglang")
@pytest.mark.parametrize("side", ["kvbench", "sglang"])
def test_bench_decode_plan_vs_sglang(benchmark, side):
    benchmark.extra_info.update({"requests": N_RUNNING, "page_size": PS, "block_size": BLOCK, "audit": "off"})
    if side == "kvbench":
        s = EngineSide()
        benchmark.pedantic(s.step, setup=s.setup, rounds=150, iterations=1, warmup_rounds=3)
        plan = np.array(s.plan_s[3:] or s.plan_s) * 1e6  # the warm-up rounds are not timed (none without timing)
        plan_us, plan_med = float(plan.mean()), float(np.median(plan))
        result = np.array(s.result_s[3:] or s.result_s) * 1e6
        _side["kvbench"], _side["kvbench_median"] = plan_us, plan_med
        benchmark.extra_info.update(plan_us_per_decode_step=round(plan_us, 1), plan_us_median=round(plan_med, 1),
                                    result_us_per_decode_step=round(float(result.mean()), 1))
        assert s.engine.manager.syncs == 0 and s.engine.manager.stranded_slots == 0
        # The accounting-only path keeps no device copy: nothing follows the host tables.
        assert not s.engine.manager.req_to_token.changes.following
        print(f"\nkvbench plan_us_per_decode_step at {N_RUNNING} running: mean {plan_us:.1f} us, "
              f"median {plan_med:.1f} us; result_us_per_decode_step mean {float(result.mean()):.1f} us")
        return
    sg_sizing = pytest.importorskip("sglang.srt.mem_cache.allocation_sizing")
    sg_paged = pytest.importorskip("sglang.srt.mem_cache.allocator.paged")
    import torch

    s = SGLangSide(sg_sizing, sg_paged, torch)
    benchmark.pedantic(s.step, setup=s.setup, rounds=150, iterations=1, warmup_rounds=3)
    stats = getattr(benchmark, "stats", None)
    if stats is not None and "kvbench" in _side:  # timing is off under xdist
        sg_us, sg_med = 1e6 * stats.stats.mean, 1e6 * stats.stats.median
        ratio, ratio_med = _side["kvbench"] / sg_us, _side["kvbench_median"] / sg_med
        benchmark.extra_info.update(sglang_us=round(sg_us, 1), sglang_us_median=round(sg_med, 1),
                                    ratio=round(ratio, 3), ratio_median=round(ratio_med, 3))
        print(f"\nSGLang 0.5.23 host path at {N_RUNNING} running: mean {sg_us:.1f} us, median {sg_med:.1f} us; "
              f"kvbench/SGLang = {ratio:.3f}x (means), {ratio_med:.3f}x (medians); the issue's target is <= 0.25x")
        # The same two paths again in alternating blocks: the ratio a shared machine distorts least.
        k_med, kr_med, g_med = interleaved(EngineSide(), s)
        benchmark.extra_info.update(interleaved_kvbench_us_median=round(k_med, 1),
                                    interleaved_kvbench_with_result_us_median=round(kr_med, 1),
                                    interleaved_sglang_us_median=round(g_med, 1),
                                    interleaved_ratio_median=round(k_med / g_med, 3),
                                    interleaved_ratio_with_result_median=round(kr_med / g_med, 3))
        print(f"interleaved blocks: kvbench plan median {k_med:.1f} us, SGLang median {g_med:.1f} us; "
              f"kvbench/SGLang = {k_med / g_med:.3f}x (plan + result processing: {kr_med:.1f} us, "
              f"{kr_med / g_med:.3f}x)")
