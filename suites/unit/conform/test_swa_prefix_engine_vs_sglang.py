"""An SWA engine run's tree calls (mini_engine/memory/tree/swa_prefix.py), as its trace records them,
replayed on SGLang 0.5.23's own UnifiedRadixCache with FULL and SWA components: the
checker ``kvbench conform`` runs (harness/conform/swa_tree.py, over the CPU build of
harness/conform/sglang_swa_radix.py).

A hybrid-SWA engine run with shared prompts and pools small enough to evict writes every
call its SWAPrefixCache makes as an ``swa_`` trace record: matches, inserts (with the
FULL slots, the SWA slots the pool maps them to, the request's SWA cursor and protected
length), locks, unlocks and evictions of FULL and SWA tokens. The same calls, in order,
on SGLang's class must give the same matched lengths, the same length already cached per
insert, the same FULL lock deltas, the same tokens evicted, the same FULL and SWA
evictable sizes after every call, and the same tree at the end; ``kvbench conform`` on
the trace file conforms, and an edited record is a divergence.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.conform.check import conform
from harness.conform.swa_tree import SWATreeConform
from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine, open_trace
from mini_engine.memory.trace.tree_calls import SWA_TREE_OPS, TokenStore
from mini_engine.request import Request
from suites.unit.conform.test_swa_radix_vs_sglang import our_nodes, sg_nodes, sgswa  # noqa: F401 (the fixture)
from suites.unit.memory.tree.test_swa_tree_edges import _engine as _released_engine


def _engine(ps: int, pages: int, window: int, stagger: int, overlap: bool, seed: int, spec: dict | None = None):
    cfg = EngineConfig(page_size=ps, pool_tokens=pages * ps, max_context=512, max_running=4, chunked_prefill=64,
                       window=window, overlap=overlap, audit="raise", **(spec or {}))
    rng = np.random.default_rng(seed)
    groups = [rng.integers(1, 400, 200).tolist() for _ in range(2)]
    reqs = [Request(rid=i, prompt=groups[i % 2][: 60 + 17 * (i % 5)] + rng.integers(1, 400, 5 + 7 * (i % 3)).tolist(),
                    max_new_tokens=20 + 9 * (i % 4), arrival_step=i * stagger) for i in range(12)]
    buf = io.StringIO()
    with open_trace(cfg, buf) as trace:
        e = Engine(cfg, trace=trace)
        res = e.run(reqs)
    assert res.verdict == "ok", res.error
    lines = [json.loads(line) for line in buf.getvalue().splitlines()]
    return e, res.stats, lines


def _replay(lines) -> tuple[SWATreeConform, set]:
    """Every SWA tree record of a trace on SGLang's tree; asserts each conforms."""
    checker, ops = SWATreeConform(lines[0], TokenStore()), set()
    for rec in lines[1:]:
        if rec["op"] == "tokens":
            checker.tokens.add(rec)
        elif rec["op"] in SWA_TREE_OPS:
            ops.add(rec["op"])
            assert checker.check(rec) is None, rec
    return checker, ops


class _Trees:
    """What our_nodes / sg_nodes read: the two trees."""

    def __init__(self, ours, sgt, sg):
        self.our, self.sgt, self.sg = ours, sgt, sg


@pytest.mark.parametrize("ps, pages, window, stagger, overlap", [
    (16, 60, 32, 3, False), (4, 200, 16, 2, True), (1, 700, 8, 5, False), (8, 40, 24, 1, True)])
def test_engine_swa_tree_calls_replay_on_sglangs_tree(sgswa, ps, pages, window, stagger, overlap):  # noqa: F811
    e, stats, lines = _engine(ps, pages, window, stagger, overlap, seed=ps)
    checker, ops = _replay(lines)
    assert {"swa_tree", "swa_match", "swa_insert", "swa_lock", "swa_unlock"} <= ops
    assert our_nodes(_Trees(e.manager.prefix.tree, sgswa, checker.tree)) == sg_nodes(_Trees(None, sgswa, checker.tree))
    if ps == 16:
        assert "swa_evict" in ops and stats["tree_evicted_pages"] > 0


@pytest.mark.parametrize("ps, pages, window, overlap", [(4, 200, 16, False), (16, 60, 32, True), (1, 700, 8, False)])
def test_eagle_swa_runs_key_the_tree_by_bigrams_and_replay(sgswa, ps, pages, window, overlap):  # noqa: F811
    """EAGLE with SWA: the SWA tree is keyed by bigrams (SGLang's tree core turns every key
    into its bigram view under is_eagle); the trace says so, the keys share, each insert
    carries one slot per bigram, and the calls replay on SGLang's class (built is_eagle)."""
    e, _, lines = _engine(ps, pages, window, 2, overlap, seed=ps, spec={"spec": "eagle", "topk": 1, "steps": 3})
    assert e.manager.prefix.bigram and lines[1:].count({"op": "swa_tree", "window": window, "bigram": True}) == 1
    assert any(r["op"] == "swa_match" and r["matched"] > 0 for r in lines[1:])
    ins = [r for r in lines[1:] if r["op"] == "swa_insert" and r["len"]]
    assert ins and all(r["len"] % ps == 1 % ps for r in ins)  # a page-aligned bigram key spans one more token
    checker, ops = _replay(lines)
    assert checker.bigram and {"swa_match", "swa_insert", "swa_lock", "swa_unlock"} <= ops
    assert our_nodes(_Trees(e.manager.prefix.tree, sgswa, checker.tree)) == sg_nodes(_Trees(None, sgswa, checker.tree))


@pytest.mark.parametrize("spec", [None, {"spec": "eagle", "topk": 1, "steps": 3}])
def test_early_swa_releases_replay_on_sglangs_tree(sgswa, sg, tmp_path, spec):  # noqa: F811
    """A run whose requests give up their locks' SWA part once decoding is a window past the
    prompt (SGLang's release_swa_prefix_lock): each swa_release_swa is SGLang's release_swa
    on the request's TreeLock, its unlock dec_lock_ref(skip_swa=True); both trees agree
    call by call and at the end, and kvbench conform on the trace file conforms."""
    e, path, lines = _released_engine(tmp_path, spec, release=True)
    checker, ops = _replay([json.loads(path.read_text().splitlines()[0]), *lines])
    assert "swa_release_swa" in ops
    assert our_nodes(_Trees(e.manager.prefix.tree, sgswa, checker.tree)) == sg_nodes(_Trees(None, sgswa, checker.tree))
    rep = conform(path, sg)
    assert rep.conforms and rep.swa_tree_calls > 0


def test_kvbench_conform_checks_the_swa_tree_and_reports_an_edited_record(sgswa, sg, tmp_path):  # noqa: F811
    """The trace file of an evicting SWA run conforms with its SWA tree calls counted; an
    edited matched length, or an edited SWA evictable size, is that call's divergence."""
    _, stats, lines = _engine(16, 60, 32, 3, False, seed=16)
    assert stats["tree_evicted_pages"] > 0
    path = tmp_path / "swa.jsonl"

    def write(recs):
        path.write_text("".join(json.dumps(r) + "\n" for r in recs))
        return conform(path, sg)

    rep = write(lines)
    n = sum(r["op"] in SWA_TREE_OPS[1:] for r in lines[1:])
    assert rep.conforms and rep.swa_tree_calls == n > 0 and rep.tree_calls == 0
    match = next(i for i, r in enumerate(lines) if r.get("op") == "swa_match" and r["matched"] > 0)
    evict = next(i for i, r in enumerate(lines) if r.get("op") == "swa_evict")
    for at, fld, field_said in ((match, "matched", "matched"), (evict, "swa_evictable", "swa_evictable size")):
        edited = [dict(r) for r in lines]
        edited[at][fld] += 16
        d = write(edited).first_divergence
        assert d is not None and d.line == at + 1 and d.op == lines[at]["op"] and d.field.startswith(field_said)
        assert (d.expected, d.got) == (lines[at][fld] + 16, lines[at][fld])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(ps=st.sampled_from([1, 4, 16]), window=st.sampled_from([8, 16, 40]), pages=st.integers(30, 120),
       stagger=st.integers(0, 4), overlap=st.booleans(), seed=st.integers(0, 1000))
def test_shared_prompt_swa_runs_hold_k14_and_replay(sgswa, ps, window, pages, stagger, overlap, seed):  # noqa: F811
    """Any shared-prompt SWA run: the engine's audit (K1-K14) raises on a violation, and its
    traced tree calls replay on SGLang's class with the same results."""
    pages = max(pages, 1200 // ps)  # room for the longest request whole
    e, _, lines = _engine(ps, pages, window, stagger, overlap, seed)
    checker, _ = _replay(lines)
    assert our_nodes(_Trees(e.manager.prefix.tree, sgswa, checker.tree)) == sg_nodes(_Trees(None, sgswa, checker.tree))


def test_the_branching_point_is_sglangs(sgswa, sg, tmp_path):  # noqa: F811
    """The worked branching run (suites/unit/engine/test_prefix_cache.py) conforms on SGLang's
    UnifiedRadixCache, its branching point included (SGLang's match result carries it); a
    match recorded without one is that call's divergence."""
    from suites.unit.engine.test_prefix_cache import branching_run

    _, lines = branching_run()
    path = tmp_path / "branch.jsonl"

    def write(recs):
        path.write_text("".join(json.dumps(r) + "\n" for r in recs))
        return conform(path, sg)

    assert write(lines).conforms
    at = next(i for i, r in enumerate(lines) if r.get("op") == "swa_match" and r["full_hit"] > r["matched"])
    edited = [dict(r) for r in lines]
    edited[at]["full_hit"] = 0
    d = write(edited).first_divergence
    assert d is not None and d.line == at + 1 and d.field.startswith("swa_branching_seqlen")
    assert (d.expected, d.got) == (None, 512)
