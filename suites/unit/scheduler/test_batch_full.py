"""SGLang's batch_is_full in kvbench's admission (mini_engine/scheduler/batch_full.py): worked
examples on small pools, the rule's clearing conditions, and a run-to-completion property.
suites/unit/conform/test_batch_is_full_vs_sglang.py runs SGLang's own scheduler code beside it."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from mini_engine.scheduler.batch_full import AdmissionGate
from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.request import Request


def _run(spec, *, gate: bool = True, overlap: bool = False, pool: int = 256, chunk: int = 256,
         max_running: int = 64, admission: str = "sglang", cache: str = "chunk", profile: str = "sglang-0.5.23"):
    """Run distinct prompts; returns (result, [(step, rid, start, end)] of each chunk, {rid: finish step})."""
    cfg = EngineConfig(profile=profile, spec="none", page_size=16, pool_tokens=pool, chunked_prefill=chunk, prefix_cache=cache,
                       max_running=max_running, max_context=8192, admission=admission, overlap=overlap)
    engine = Engine(cfg)
    sched = engine.sched
    sched.gate.active = sched.gate.active and gate
    chunks, finished = [], {}
    admit, finish = sched.admit, sched.finish

    def recording_admit():
        c, pd = admit()
        chunks.extend((engine.step_no, x.req.rid, x.start, x.end) for x in c)
        return c, pd

    def recording_finish(r, **kw):
        finished[r.rid] = engine.step_no
        finish(r, **kw)

    sched.admit, sched.finish = recording_admit, recording_finish
    res = engine.run([Request(rid=i, prompt=list(range(i * 10000, i * 10000 + n)), max_new_tokens=o,
                              arrival_step=a) for i, (n, o, a) in enumerate(spec)])
    return res, chunks, finished


def test_worked_example_a_refused_request_waits_for_a_leave():
    # ps 16, 256 tokens, no tree: A and B of 64 prompt + 100 outputs. A's pass admits A
    # (64 + 16 + 100 = 180 reserved, 76 left) and refuses B (80 > 76): NO_TOKEN sets the
    # flag, but on an empty running batch, which the merge replaces next step. The next
    # pass tests B again with A decoding and refuses it: the flag stays until A leaves.
    # A finishes at step 99; B joins at step 100, the pass after. Re-testing every step
    # (the flag off) admits B at step 94, while A still decodes.
    res, chunks, finished = _run([(64, 100, 0), (64, 100, 0)])
    assert res.verdict == "ok"
    assert finished[0] == 99 and chunks == [(0, 0, 0, 64), (100, 1, 0, 64)]
    _, chunks, _ = _run([(64, 100, 0), (64, 100, 0)], gate=False)
    assert chunks == [(0, 0, 0, 64), (94, 1, 0, 64)]


def test_under_overlap_the_leave_is_seen_one_step_later():
    # event_loop_overlap: A's last result lands after step 100 was planned (A sits it out),
    # so the first pass that sees A gone is step 101's, in SGLang and here.
    res, chunks, finished = _run([(64, 100, 0), (64, 100, 0)], overlap=True)
    assert res.verdict == "ok"
    assert finished[0] == 100 and chunks == [(0, 0, 0, 64), (101, 1, 0, 64)]


def test_0518_sees_a_finish_at_the_next_update_running_batch():
    # SGLang 0.5.18 filters finished requests out of its running batch only in
    # update_running_batch, after the pass (0.5.23 before every pass). Overlap: A's last
    # result lands at step 100 (0.5.18 plans every running request, A too); step 101's pass
    # still finds the flag set, its update_running_batch drops A; B joins at step 102, one
    # step after 0.5.23's 101 (above). SGLang 0.5.18's own loop gives the same (kvbench
    # conform --engine, suites/unit/conform/test_reference_0518.py).
    res, chunks, finished = _run([(64, 100, 0), (64, 100, 0)], overlap=True, profile="sglang-pre-35265")
    assert res.verdict == "ok"
    assert finished[0] == 100 and chunks == [(0, 0, 0, 64), (102, 1, 0, 64)]


def test_0518_an_iteration_that_only_filters_is_not_a_step():
    # Overlap off: A finishes at step 99; SGLang 0.5.18's next iteration forms no batch (the
    # flag), filters A out (its running batch is then empty) and runs nothing: not a step. The
    # iteration after it admits B, at step 100 as on 0.5.23 (Engine.step passes again; the
    # late filter alone would leave that step nothing to run: pool_exhausted, B never admitted).
    res, chunks, finished = _run([(64, 100, 0), (64, 100, 0)], profile="sglang-pre-35265")
    assert res.verdict == "ok"
    assert finished == {0: 99, 1: 199} and chunks == [(0, 0, 0, 64), (100, 1, 0, 64)]


def test_kvbench_estimate_keeps_retesting():
    # admission = "estimate" (host-aligned, floor-free, --admission estimate): no flag.
    cfg = EngineConfig(spec="none", page_size=16, pool_tokens=256, admission="estimate")
    assert not Engine(cfg).sched.gate.active


def test_swa_pools_have_no_flag():
    # SGLang clears it at every pass for hybrid SWA models: the same as none.
    cfg = EngineConfig(spec="none", page_size=16, pool_tokens=1024, window=64)
    assert not Engine(cfg).sched.gate.active


def test_rows_exhausted_sets_the_flag_until_a_leave():
    # max_running 1: B finds no row (get_num_allocatable_reqs <= 0) and joins once A has left.
    res, chunks, finished = _run([(16, 5, 0), (16, 5, 0)], max_running=1, pool=1024)
    assert res.verdict == "ok" and chunks[1][0] == finished[0] + 1


def _chunk(end: int, target: int):
    return SimpleNamespace(end=end, req=SimpleNamespace(prefill_target=target))


def test_what_clears_the_flag():
    g = AdmissionGate(True)
    g.begin(True)
    g.begin(True)  # running held a request at the last pass: the flag can stick
    g.close()
    g.end([_chunk(64, 64)])  # a batch whose chunks end their prefills
    g.begin(True)
    assert g.shut  # nothing left, nothing chunked, still decoding
    g.left()
    g.begin(True)
    assert not g.shut  # a request left
    g.close()
    g.end([_chunk(32, 64)])
    g.begin(True)
    assert not g.shut  # the chunked request was filtered out of the previous batch
    g.close()
    g.end([])
    g.begin(False)
    assert not g.shut  # the running batch is empty
    g.close()  # set with nothing decoding: the merge replaces that batch next step
    g.end([])
    g.begin(True)
    assert not g.shut
    g.refused(False)  # NO_TOKEN with nothing held leaves it clear
    assert not g.shut
    assert not AdmissionGate(False).shut


def test_0518_a_finish_clears_the_flag_after_the_next_pass():
    g = AdmissionGate(True, late_filter=True)
    g.begin(True)
    g.begin(True)
    g.close()
    g.finished(filtered=False)  # a decode result: still in SGLang's running batch
    g.begin(False)  # the mini engine's running set is empty, SGLang's is not
    assert g.shut  # this pass admits nobody
    assert g.updated()  # it formed no batch: update_running_batch filters the request out
    g.begin(True)
    assert not g.shut
    g.close()
    g.finished(filtered=True)  # a prefill result processed in its own step
    g.begin(True)
    assert not g.shut  # the next pass's filter of that batch dropped it first
    assert not g.updated()


@settings(max_examples=30, deadline=None)
@given(spec=st.lists(st.tuples(st.integers(1, 300), st.integers(1, 200), st.integers(0, 30)), min_size=1,
                     max_size=8),
       pool_pages=st.integers(24, 64), chunk_pages=st.integers(1, 16), max_running=st.sampled_from([1, 2, 64]),
       overlap=st.booleans(), cache=st.sampled_from(["radix", "chunk"]),
       profile=st.sampled_from(["sglang-0.5.23", "sglang-pre-35265"]))
def test_every_request_finishes_under_the_flag(spec, pool_pages, chunk_pages, max_running, overlap, cache, profile):
    # The flag never outlives the requests that could clear it: every request that fits the
    # pool alone finishes, and a request joins only after its arrival.
    pool = pool_pages * 16
    spec = [(n, o, a) for n, o, a in spec if n + o + 32 < pool] or [(10, 10, 0)]
    res, chunks, finished = _run(spec, pool=pool, chunk=chunk_pages * 16, max_running=max_running,
                                 overlap=overlap, cache=cache, profile=profile)
    assert res.verdict == "ok", res.error
    assert set(finished) == set(range(len(spec)))
    assert all(step >= spec[rid][2] for step, rid, _, _ in chunks)
