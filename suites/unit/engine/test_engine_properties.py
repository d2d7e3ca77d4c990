"""The profiles under random configurations and memory pressure.

Property: for any page size, either algorithm, with or without SWA and PD
arrivals, and a pool barely larger than one request, every request finishes with
its full output, no invariant is violated and the pool is full after the drain,
under host-aligned (0 stranded slots too) and under both SGLang profiles (their
segment free returns every page). Only a floor free leaks, exactly the formula's
count. A state machine adds requests while the engine runs, checking
conservation after every step.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, assume, event, given, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine, StepOutcome, admission_pages, request_pages
from mini_engine.errors import ConfigError
from mini_engine.request import Request, Status
from mini_engine.forward.accounting import SimulatedBackend

# Modest by default (a shared 2-core machine); KVBENCH_EXAMPLES=400 for a deep run.
EXAMPLES = int(os.environ.get("KVBENCH_EXAMPLES", "25"))
LOCAL = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def engine_options(draw) -> dict:
    ps = draw(st.sampled_from([1, 2, 16, 64]))
    spec = draw(st.sampled_from(["none", "eagle", "dflash"]))
    opts: dict = dict(page_size=ps, spec=spec, seed=draw(st.integers(0, 2**16)),
                      chunked_prefill=draw(st.sampled_from([16, 100, 8192])),
                      max_running=draw(st.sampled_from([2, 5, 64])), max_context=512,
                      # SGLang's 512 would set the pool of a PD workload, not the pressure these
                      # properties want; test_pd_budget_vs_sglang.py runs the budget at 512.
                      reserved_decode_tokens=draw(st.sampled_from([0, 8, 64])))
    if spec == "dflash":
        opts["block_size"] = draw(st.sampled_from([1, 2, 4, 8, 16]))
        if draw(st.booleans()):
            opts["draft_window"] = draw(st.integers(1, 96))
    if spec == "eagle":
        topk, steps = draw(st.integers(1, 4)), draw(st.integers(1, 4))
        opts.update(topk=topk, steps=steps,
                    num_draft_tokens=draw(st.integers(2, steps * topk + 1)) if topk > 1 else steps + 1)
    if spec != "none" and draw(st.booleans()):
        most = EngineConfig.from_dict(opts).max_accept
        opts["accept_mean"] = 1.0 + draw(st.floats(0.0, 1.0)) * (most - 1)
    if draw(st.booleans()):
        opts["window"] = draw(st.integers(1, 200))
        opts["layer_pattern"] = draw(st.sampled_from(["all-local", "1:1", "3:1", "5:1"]))
        opts["swa_eviction_interval"] = draw(st.sampled_from([1, 16, 128]))
        opts["prefix_cache"] = draw(st.sampled_from(["radix", "chunk"]))
    return opts


def make_reqs(draw, n: int, pd: bool) -> list[Request]:
    reqs = []
    for i in range(n):
        prompt = draw(st.lists(st.integers(0, 999), min_size=1, max_size=150))
        is_pd = pd and draw(st.booleans())
        reqs.append(Request(rid=i, prompt=prompt, max_new_tokens=draw(st.integers(1, 150)),
                            fill_len=len(prompt) if is_pd else 0,
                            arrival_step=draw(st.integers(0, 20)) if is_pd else 0))
    return reqs


def whole_page_window(opts: dict) -> dict:
    """opts with a window the 0.5.18 profile models: longer than a page only in whole pages
    (EngineConfig refuses others under it)."""
    w, ps = opts.get("window"), opts.get("page_size", 16)
    if w is not None and w > ps and w % ps and opts.get("prefix_cache", "radix") == "radix":
        return dict(opts, window=-(-w // ps) * ps)
    return opts


def pressured(opts: dict, reqs: list[Request], factor: int) -> EngineConfig:
    probe = EngineConfig.from_dict(dict(opts, pool_tokens=1 << 20))
    biggest = max(request_pages(probe, len(r.prompt), r.max_new_tokens) for r in reqs)
    pages = biggest * factor
    if probe.has_swa:  # the SWA pool (swa_ratio of the full one) must hold the biggest request too
        pages = int(pages / probe.rules.swa_ratio) + 1
    while True:  # and SGLang's rules at arrival: an output left by the clip, a PD prealloc ever possible
        cfg = EngineConfig.from_dict(dict(opts, pool_tokens=pages * probe.page_size))
        try:
            Engine(cfg).validate(reqs)
            return cfg
        except ConfigError:
            pages += max(1, pages // 8)


def expected_outputs(cfg: EngineConfig, reqs: list[Request]) -> dict[int, list[int]]:
    sim = SimulatedBackend(cfg)
    return {r.rid: [sim.token(r.rid, len(r.prompt) + i) for i in range(r.max_new_tokens)] for r in reqs}


@LOCAL
@given(opts=engine_options(), data=st.data(), factor=st.sampled_from([1, 2, 6]), pd=st.booleans())
def test_aligned_finishes_everything_clean(opts, data, factor, pd):
    reqs = make_reqs(data.draw, data.draw(st.integers(1, 8)), pd)
    cfg = pressured(dict(opts, profile="host-aligned"), reqs, factor)
    result = Engine(cfg).run(reqs)
    assert result.violations == {}, result.violation_samples[:3]
    assert result.verdict == "ok", result.error
    assert result.outputs == expected_outputs(cfg, reqs)
    assert all(r.status is Status.FINISHED for r in reqs)
    s = result.stats
    assert s["leaked_pages"] == 0 == s["predicted_leaked_pages"]
    assert s["leaked_swa_pages"] == 0
    assert s["peak_stranded_slots"] == 0
    assert s["peak_pages_held"] <= cfg.num_pages
    assert s["syncs"] == 0  # host planning reads no device state


@LOCAL
@given(opts=engine_options(), data=st.data(), factor=st.sampled_from([1, 2, 6]), pd=st.booleans(),
       profile=st.sampled_from(["sglang-0.5.23", "sglang-pre-35265"]), free=st.sampled_from([None, "dedup"]))
def test_sglang_profiles_finish_everything_and_leak_nothing(opts, data, factor, pd, profile, free):
    reqs = make_reqs(data.draw, data.draw(st.integers(1, 8)), pd)
    if profile == "sglang-pre-35265":
        opts = whole_page_window(opts)
    cfg = pressured(dict(opts, profile=profile, free_policy=free), reqs, factor)
    result = Engine(cfg).run(reqs)
    assert result.violations == {}, result.violation_samples[:3]
    assert result.verdict == "ok", result.error
    assert result.outputs == expected_outputs(cfg, reqs)
    s = result.stats
    assert s["leaked_pages"] == 0 == s["leaked_swa_pages"] == s["predicted_leaked_pages"]
    if cfg.page_size == 1:
        assert s["stranded_slots_sum"] == 0


class EngineMachine(RuleBasedStateMachine):
    """Requests keep arriving while the engine steps; the pool stays conserved."""

    @initialize(opts=engine_options(), factor=st.sampled_from([1, 2, 4]))
    def start(self, opts, factor):
        self.opts, self.factor = opts, factor
        self.engine: Engine | None = None
        self.reqs: list[Request] = []
        self.next_rid = 0

    @rule(data=st.data(), n=st.integers(1, 4), pd=st.booleans())
    def submit(self, data, n, pd):
        reqs = make_reqs(data.draw, n, pd)
        for r in reqs:
            r.rid, self.next_rid = self.next_rid, self.next_rid + 1
            if r.fill_len:
                r.arrival_step = 0
        if self.engine is None:
            self.engine = Engine(pressured(dict(self.opts, profile="host-aligned"), reqs, self.factor))
        cfg = self.engine.cfg
        # The pool was sized on the first requests: later ones must fit it too.
        assume(all(request_pages(cfg, len(r.prompt), r.max_new_tokens) <= admission_pages(cfg) for r in reqs))
        self.engine.submit(reqs)
        self.reqs += reqs

    @precondition(lambda self: self.engine is not None)
    @rule(k=st.integers(1, 30))
    def steps(self, k):
        for _ in range(k):
            assert self.engine.tick() is not StepOutcome.EXHAUSTED, "pool exhausted under the aligned policy"

    @invariant()
    def conserved(self):
        e = self.engine
        if e is None:
            return
        assert e.auditor.counts == {}, e.auditor.records[:3]
        m = e.manager
        assert m.num_free_pages + m.pages_held + m.tree_pages == m.total_pages  # K8, no leak while running
        assert m.stranded_slots == 0
        for r in e.sched.running:
            assert len(r.outputs) <= r.max_new_tokens
            assert r.kv.committed <= r.kv.allocated
            if not r.prefilling:
                assert r.kv.committed == r.seq_len - 1  # the last token's KV is written next step

    def teardown(self):
        if self.engine is None:
            return
        result = self.engine.run()
        assert result.verdict == "ok", result.error
        assert result.outputs == expected_outputs(self.engine.cfg, self.reqs)
        assert result.stats["leaked_pages"] == 0 == result.stats["leaked_swa_pages"]


# Fewer runs than the @LOCAL properties below (each example drains a whole engine): those
# run the same admission, retraction and release rules on whole workloads; the machine
# adds interleavings of arrivals and steps.
EngineMachine.TestCase.settings = settings(max_examples=max(5, EXAMPLES * 2 // 5), stateful_step_count=20, deadline=None,
                                           suppress_health_check=[HealthCheck.too_slow])
TestEngineMachine = EngineMachine.TestCase


@LOCAL
@given(opts=engine_options(), data=st.data(), factor=st.sampled_from([1, 2, 6]), pd=st.booleans(),
       free=st.sampled_from(["segment", "floor", "dedup"]))
def test_unaligned_leaks_exactly_the_formula_and_never_hangs(opts, data, factor, pd, free):
    reqs = make_reqs(data.draw, data.draw(st.integers(1, 8)), pd)
    cfg = pressured(dict(whole_page_window(opts), profile="sglang-pre-35265", policy="unaligned", free_policy=free),
                    reqs, factor)
    result = Engine(cfg).run(reqs)
    event(f"verdict {result.verdict}")
    s = result.stats
    assert s["leaked_pages"] == s["predicted_leaked_pages"]
    assert s["leaked_swa_pages"] == s["predicted_leaked_swa_pages"]
    if cfg.rules.free != "floor" or cfg.page_size == 1:
        assert s["leaked_pages"] == 0 and result.verdict != "pool_exhausted"
    if cfg.page_size == 1:
        assert result.verdict == "ok" and s["stranded_slots_sum"] == 0
    if result.verdict == "pool_exhausted":
        assert s["leaked_pages"] > 0 and s["finished_requests"] < len(reqs)
    else:
        assert result.outputs == expected_outputs(cfg, reqs)
    assert set(result.violations) <= {"K8"}  # what a floor free of unaligned extents breaks, nothing else
