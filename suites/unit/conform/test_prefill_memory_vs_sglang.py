"""The memory side of admission (mini_engine/scheduler/prefill_adder.py) against SGLang 0.5.23's PrefillAdder.

An engine run under ``admission = "sglang"`` with a pool small enough for memory to bind;
before every admission the engine's state is handed to SGLang's own adder (compiled from
source, test_prefill_adder_vs_sglang.py's classes): the tokens free (its allocator's
``available_size``), the decoding requests (its running batch), the continuing chunked
request (``add_chunked_req``) and the waiting queue (``add_one_req`` until it stops).
The requests SGLang admits, each chunk's start and end, and the budget's offsets and
``rem_input_tokens`` afterwards must equal kvbench's. The requests run to their length,
as SGLang's ``ignore_eos`` requests do. Prompts are distinct, so nothing matches; a batch
that starts with evictable pages in the tree (after a finish) is skipped, since the
stand-in tree here matches nothing, and so is a pass that SGLang's ``batch_is_full`` shuts
(the adder is not asked then; test_batch_is_full_vs_sglang.py runs SGLang's scheduler
around it).

Worked example (the module docstring's): ps 16, 4096 tokens, one request decoding with
100 outputs to go, two waiting of 1000 prompt and 1500 outputs: one joins.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.scheduler.prefill_adder import PrefillMemory
from mini_engine.request import Request
from suites.unit.conform.test_prefill_adder_vs_sglang import _Req, adder_classes  # noqa: F401 (the fixture)

MAX_PREFILL_TOKENS = 16384


def _sg_req(r: Request) -> _Req:
    q = _Req(r.rid, len(r.prompt), r.max_new_tokens)
    q.origin_input_ids = list(r.prompt)
    q.output_ids = list(r.outputs)
    q.full_untruncated_fill_ids = list(r.prompt) + list(r.outputs)
    return q


def sglang_admission(sgc, ps: int, chunk: int, cache: str, free: int, decoding: list[Request],
                     chunked: Request | None, waiting: list[Request], ratio: float = 0.7):
    """SGLang's batch for this state: [(rid, start, end)] and (total, current, rem_input).
    ratio: the scheduler's new-token ratio (0.5.23 reads it for no ignore_eos request)."""
    tree = SimpleNamespace(disable=cache == "chunk", supports_mamba=lambda: False,
                           supports_prefix_sharing=lambda: cache == "radix", evictable_size=lambda: 0,
                           lock=lambda node: None, unlock=lambda lock: None, buffer_pipeline=None,
                           finish_storage_prefetch_admission=lambda *a, **k: None,
                           discard_storage_prefetch_accounting=lambda *a: None)
    alloc = SimpleNamespace(page_size=ps, available_size=lambda: free, request_slot_reserve=lambda **k: 0)
    adder = run_adder(sgc, ps, chunk, tree, alloc, decoding, chunked, waiting, ratio)
    b = adder.memory_budget
    return ([(q.rid, q.prefix_len, q.extend_end) for q in adder.can_run_list],
            (b.total_offset, b.current_offset, adder.rem_input_tokens))


def run_adder(sgc, ps: int, chunk: int, tree, alloc, decoding: list[Request], chunked: Request | None,
              waiting: list[Request], ratio: float = 0.7):
    """One pass of SGLang's PrefillAdder over (stand-in) tree and allocator, as
    _get_new_batch_prefill_raw drives it: the continuing chunk first, then the waiting
    queue until the adder stops. Returns the adder."""
    alloc.create_prefill_budget = lambda t, num_mixed_decode_tokens=0: sgc.budget(
        alloc, t, num_mixed_decode_tokens=num_mixed_decode_tokens)
    running = SimpleNamespace(reqs=[_sg_req(r) for r in decoding])
    adder = sgc.adder(ps, tree, alloc, running, ratio, MAX_PREFILL_TOKENS, chunk)
    q = None
    if chunked is not None:
        q = _sg_req(chunked)
        q.full_untruncated_fill_ids = q.full_untruncated_fill_ids[:chunked.prefill_target]
        q.prefix_len = q.extend_end = chunked.prefilled
        q.kv.req_pool_idx = 1
    return drive(sgc, adder, q, map(_sg_req, waiting))


def drive(sgc, adder, chunked, waiting):
    """_get_new_batch_prefill_raw's pass over an adder (either release's): the continuing
    chunked request first, then the waiting queue until the adder stops. Returns the adder."""
    if chunked is not None:
        adder.add_chunked_req(chunked)
    for q in waiting:
        if adder.budget_state() == sgc.result.OTHER:
            break
        if adder.add_one_req(q, has_chunked_req=chunked is not None,
                             truncation_align_size=None) != sgc.result.CONTINUE:
            break
    return adder


def compared_batches(sgc, prompts, outs, arrivals, ps, chunk, pool, cache, *, profile: str | None = None,
                     admission=sglang_admission) -> int:
    """Run the engine; check every admission against SGLang's (``admission``: the release's
    adder for a state, sglang_admission's signature). Returns how many were compared."""
    cfg = EngineConfig(spec="none", page_size=ps, pool_tokens=pool, chunked_prefill=chunk, prefix_cache=cache,
                       max_running=1024, max_context=8192, admission="sglang",
                       **({"profile": profile} if profile else {}))
    engine = Engine(cfg)
    engine.submit([Request(rid=i, prompt=list(range(i * 10000, i * 10000 + n)), max_new_tokens=o, arrival_step=a)
                   for i, (n, o, a) in enumerate(zip(prompts, outs, arrivals))])
    sched, m = engine.sched, engine.manager
    admit, begin = sched.admit, sched.gate.begin
    compared = 0
    shut = [False]

    def recording_begin(decoding):
        begin(decoding)
        shut[0] = sched.gate.shut

    sched.gate.begin = recording_begin

    def checked_admit():
        nonlocal compared
        free, evictable = m.num_free_pages * ps, m.evictable_pages
        decoding = sched.decode_batch()
        chunked = next((r for r in sched.running if r.prefilling), None)
        waiting = list(sched.waiting)
        ratio = sched.ratio
        chunks, pd = admit()
        if evictable or shut[0] or not (waiting or chunked):
            return chunks, pd
        ours = [(c.req.rid, c.start, c.end) for c in chunks]
        mem: PrefillMemory = sched.last_memory
        theirs, budget = admission(sgc, ps, chunk, cache, free, decoding, chunked, waiting, ratio)
        if not theirs and not decoding and not chunked:
            return chunks, pd  # an empty engine: kvbench tries its head request anyway (SGLang would stall)
        assert ours == theirs
        assert (mem.total_offset, mem.current_offset, mem.rem_input) == budget
        compared += 1
        return chunks, pd

    sched.admit = checked_admit
    res = engine.run()
    assert res.verdict == "ok", res.error
    return compared


@settings(max_examples=40, deadline=None)
@given(reqs=st.lists(st.tuples(st.integers(1, 900), st.integers(1, 600), st.integers(0, 40)), min_size=1, max_size=10),
       ps=st.sampled_from([1, 16, 64]), chunk_pages=st.integers(2, 24), pool_pages=st.integers(20, 80),
       cache=st.sampled_from(["radix", "chunk"]))
def test_admissions_equal_sglangs(adder_classes, reqs, ps, chunk_pages, pool_pages, cache):  # noqa: F811
    chunk = chunk_pages * max(ps, 16)
    pool = pool_pages * max(ps, 32)
    # Every request fits the pool alone, with SGLang's page of slack: the run finishes.
    reqs = [(n, o, a) for n, o, a in reqs if n + o + 2 * max(ps, 16) < pool] or [(10, 10, 0)]
    prompts, outs, arrivals = zip(*reqs)
    compared_batches(adder_classes, prompts, outs, arrivals, ps, chunk, pool, cache)


def test_worked_example_one_of_two_joins(adder_classes):  # noqa: F811
    a = Request(rid=0, prompt=list(range(50)), max_new_tokens=100)
    b, c = (Request(rid=i, prompt=list(range(i * 10000, i * 10000 + 1000)), max_new_tokens=1500) for i in (1, 2))
    mem = PrefillMemory(lambda: 4096, 16, [a])
    assert mem.total_offset == 100
    assert mem.fits(b, 1000)
    mem.charge(b, 1000, True)
    assert mem.remaining_total == 4096 - 100 - (1008 + 16 + 1500) == 1472
    assert not mem.fits(c, 1000)
    batch, budget = sglang_admission(adder_classes, 16, 8192, "radix", 4096, [a], None, [b, c])
    assert batch == [(1, 0, 1000)] and budget == (mem.total_offset, mem.current_offset, mem.rem_input)


def test_outputs_are_capped_at_4096_and_the_test_is_strict(adder_classes):  # noqa: F811
    # 100 prompt + min(10000, 4096) outputs + 16 = 4212: admitted only with 4213 tokens or more.
    r = Request(rid=0, prompt=list(range(100)), max_new_tokens=10000)
    for free, joins in ((4212, False), (4213, True)):
        assert PrefillMemory(lambda: free, 16, []).fits(r, 100) is joins
        batch, _ = sglang_admission(adder_classes, 16, 8192, "radix", free, [], None, [r])
        assert bool(batch) is joins


def test_max_prefill_tokens_closes_the_batch(adder_classes):  # noqa: F811
    # Chunks of 4096 under a 32768 chunk budget: the fourth spends max_prefill_tokens (16384).
    reqs = [Request(rid=i, prompt=list(range(i * 10000, i * 10000 + 4096)), max_new_tokens=8) for i in range(6)]
    batch, budget = sglang_admission(adder_classes, 16, 32768, "chunk", 1 << 20, [], None, reqs)
    assert [q[0] for q in batch] == [0, 1, 2, 3] and budget[2] == 0
    mem = PrefillMemory(lambda: 1 << 20, 16, [])
    for r in reqs[:4]:
        assert mem.fits_ignore_eos(r, 4096)
        mem.charge(r, 4096, True)
    assert mem.rem_input == 0 and not mem.open and (mem.total_offset, mem.current_offset) == budget[:2]


@pytest.mark.parametrize("cache", ["radix", "chunk"])
def test_a_bound_pool_is_compared_pass_by_pass(adder_classes, cache):  # noqa: F811
    """Not vacuous: eight 300-token prompts with 200 outputs each over 1,024 tokens (ps 16),
    arriving two steps apart: passes with requests decoding and one waiting, compared."""
    assert compared_batches(adder_classes, [300] * 8, [200] * 8, list(range(0, 16, 2)), 16, 512, 1024, cache) >= 3
