"""Overlap scheduling under random configurations and memory pressure.

A state machine adds requests while the engine runs with SGLang 0.5.23's profile,
overlap on or off: after every step no invariant (K1-K11) is violated, the pool is
conserved, and every request whose verify is in flight holds a reservation that
covers it (the double buffer: the plan saw a length one step stale, yet the verify
writes from the true one). Every request finishes with the outputs a synchronous
run gives, and nothing leaks.
"""

from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from mini_engine.engine import Engine, admission_pages, request_pages
from mini_engine.request import Request, Status

from . import test_engine_properties as props


class OverlapMachine(RuleBasedStateMachine):
    @initialize(opts=props.engine_options(), factor=st.sampled_from([1, 2, 4]), overlap=st.sampled_from(["on", "off"]))
    def start(self, opts, factor, overlap):
        self.opts = dict(opts, profile="sglang-0.5.23", overlap=overlap)
        self.factor = factor
        self.engine: Engine | None = None
        self.reqs: list[Request] = []
        self.next_rid = 0

    @rule(data=st.data(), n=st.integers(1, 4), pd=st.booleans())
    def submit(self, data, n, pd):
        reqs = props.make_reqs(data.draw, n, pd)
        for r in reqs:
            r.rid, self.next_rid = self.next_rid, self.next_rid + 1
            if r.fill_len:
                r.arrival_step = 0
        if self.engine is None:
            self.engine = Engine(props.pressured(self.opts, reqs, self.factor))
        cfg = self.engine.cfg
        assume(all(request_pages(cfg, len(r.prompt), r.max_new_tokens) <= admission_pages(cfg) for r in reqs))
        self.engine.submit(reqs)
        self.reqs += reqs

    @precondition(lambda self: self.engine is not None)
    @rule(k=st.integers(1, 30))
    def steps(self, k):
        for _ in range(k):
            assert self.engine.tick() is not None, "pool exhausted under SGLang's profile"

    @invariant()
    def conserved(self):
        e = self.engine
        if e is None:
            return
        assert e.auditor.counts == {}, e.auditor.records[:3]
        m = e.manager
        assert m.num_free_pages + m.pages_held + m.tree_pages == m.total_pages  # K8: segment free, nothing leaks
        # A prefill result in flight (overlap) committed its prompt at launch; its first output lands later.
        pending = e.prefiller.inflight
        landing = {id(c.req) for c in pending.chunks} if pending is not None else set()
        for r in e.sched.running:
            assert len(r.outputs) <= r.max_new_tokens
            assert r.kv.committed <= r.kv.allocated
            if not r.prefilling:
                lag = 0 if id(r) in landing else 1
                assert r.kv.committed == r.seq_len - lag  # outputs and the length land together
        if e.inflight is None:
            return
        assert e.overlap
        width = e.cfg.algo.num_draft_tokens(e.cfg)  # the positions one verify writes
        for r in e.inflight.batch:
            if r.status is Status.RUNNING and r.kv is not None:
                assert r.kv.allocated >= min(r.kv.committed + width, e.mem.row_width), (r.rid, r.kv.committed)

    def teardown(self):
        if self.engine is None:
            return
        result = self.engine.run()
        assert result.verdict == "ok", result.error
        assert result.outputs == props.expected_outputs(self.engine.cfg, self.reqs)
        s = result.stats
        assert s["leaked_pages"] == 0 == s["leaked_swa_pages"]
        if not self.engine.overlap:
            assert s["overlap_extra_reservations"] == 0 == s["overlap_extra_slots"]


OverlapMachine.TestCase.settings = settings(max_examples=max(5, props.EXAMPLES * 3 // 5), stateful_step_count=20,
                                            deadline=None, suppress_health_check=[HealthCheck.too_slow])
TestOverlapMachine = OverlapMachine.TestCase


@props.LOCAL
@given(opts=props.engine_options(), data=st.data(), factor=st.sampled_from([1, 2, 6]), pd=st.booleans())
def test_overlap_on_and_off_give_the_same_outputs(opts, data, factor, pd):
    """The loop changes when results land, never what is generated; both finish everything."""
    reqs = props.make_reqs(data.draw, data.draw(st.integers(1, 8)), pd)
    out = {}
    for overlap in ("on", "off"):
        cfg = props.pressured(dict(opts, overlap=overlap), reqs, factor)
        fresh = [Request(r.rid, list(r.prompt), r.max_new_tokens, fill_len=r.fill_len, arrival_step=r.arrival_step)
                 for r in reqs]
        result = Engine(cfg).run(fresh)
        assert result.violations == {}, result.violation_samples[:3]
        assert result.verdict == "ok", result.error
        assert result.stats["leaked_pages"] == 0
        out[overlap] = result.outputs
    assert out["on"] == out["off"]
