"""The PD decode side's prealloc budget (mini_engine/scheduler/pd_prealloc.py) against the installed
SGLang's own ``DecodePreallocQueue`` methods, compiled from disaggregation/decode.py.

An engine runs a PD workload (every request arrives by transfer) under admission "sglang"
with pools small enough for the budget to bind. At every check kvbench makes, SGLang's
budgets (``_allocatable_token_budgets``, ``_swa_tail_allocatable_token_budget``, through
``_swa_aware_allocatable_token_budgets`` at a pass's start) and a request's needs
(``_required_alloc_tokens``, ``_required_admission_tokens``, ``_prealloc_required_tokens``,
``_prealloc_kv_lens``) are computed on a stand-in queue that holds the same pools, the
same running requests and the same count of this pass's preallocs; the verdict must be
kvbench's. What joins those calls (the order ``pop_preallocated`` makes them in and its
comparisons, which its transfer plumbing keeps from being run here) is restated below,
per release. Release-neutral: CI runs it under 0.5.23 and 0.5.18.
"""

from __future__ import annotations

import ast
from types import SimpleNamespace
from typing import NamedTuple, Optional, Tuple

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

import mini_engine.scheduler.pd_prealloc as pd_budget
from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.errors import ConfigError
from mini_engine.request import Request
from mini_engine.scheduler.scheduler import Scheduler
from sglang_source import methods, source

_STATIC = {"_rebootstrap_prefill_len", "_pre_alloc_fill_len"}
_COMMON = {"_uses_swa_tail_prealloc", "_swa_tail_len", "_swa_retractable_len", "_prealloc_kv_lens",
           "_prealloc_required_tokens", "_need_space_for_single_req", "_active_req_count", "_active_reserved_tokens",
           "_swa_aware_allocatable_token_budgets", "_allocatable_token_budgets", "_swa_tail_allocatable_token_budget",
           "_required_alloc_tokens"} | _STATIC
_0523 = {"_uses_swa_reservation", "_required_admission_tokens", "_prealloc_reservation_fits", "_radix_full_evictable"}


class _SWAKVPool:
    """Stands for SWAKVPool: _uses_swa_tail_prealloc's isinstance test names it."""


class _Dummy:
    pass


@pytest.fixture(scope="module")
def queue_class(sg):  # sg: the installed SGLang, or a skip
    import torch
    from sglang.srt.environ import envs
    from sglang.srt.utils import ceil_align, get_num_new_pages

    new = sg.version != "0.5.18"
    ns = {"Optional": Optional, "Tuple": Tuple, "torch": torch, "ceil_align": ceil_align,
          "get_num_new_pages": get_num_new_pages, "SWAKVPool": _SWAKVPool, "DeepSeekV4TokenToKVPool": _Dummy,
          "CLIP_MAX_NEW_TOKEN": envs.SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION.get(),
          "is_swa_req_ring": lambda allocator: False}
    methods("sglang.srt.disaggregation.decode", "DecodePreallocQueue", _COMMON | (_0523 if new else set()), ns)
    alloc, swa_alloc = {}, {}
    if new:
        methods("sglang.srt.mem_cache.allocator.base", "BaseTokenToKVPoolAllocator",
                {"prealloc_fits", "prealloc_fits_assumes_reclaim"}, alloc)
        methods("sglang.srt.mem_cache.allocator.swa", "SWATokenToKVPoolAllocator", {"swa_capacity_and_available"},
                swa_alloc)
    # The SWA allocator's available_size (the smaller pool), which the ps-1 path reads.
    methods("sglang.srt.mem_cache.allocator.swa", "SWATokenToKVPoolAllocator", {"available_size"}, swa_alloc)
    body = {n: staticmethod(ns[n]) if n in _STATIC else ns[n] for n in _COMMON | (_0523 if new else set())}
    alloc = {n: alloc[n] for n in ("prealloc_fits", "prealloc_fits_assumes_reclaim") if n in alloc}
    swa_alloc = {n: swa_alloc[n] for n in ("swa_capacity_and_available", "available_size") if n in swa_alloc}
    return _Compiled(cls=type("Queue", (), body), ns=ns, alloc=alloc, swa_alloc=swa_alloc, new=new,
                     clip=ns["CLIP_MAX_NEW_TOKEN"])


class _Compiled:
    def __init__(self, **kw):
        self.__dict__.update(kw)

    def __repr__(self) -> str:  # hypothesis prints its arguments: not the compiled namespace
        return f"<DecodePreallocQueue compiled from SGLang {'0.5.23' if self.new else '0.5.18'}>"


def _sg_req(r: Request):
    return SimpleNamespace(origin_input_ids=r.prompt, output_ids=list(r.outputs),
                           sampling_params=SimpleNamespace(max_new_tokens=r.max_new_tokens))


def sglang_queue(qc, engine: Engine, running: list, pinned: tuple[int, int] = (0, 0)):
    """A stand-in DecodePreallocQueue with SGLang's compiled methods over the engine's pools,
    its decode radix setting and ``running`` (SGLang's requests) as the running batch;
    pinned: the (full, SWA) evictable tokens a decode-radix match has locked since."""
    cfg, m, ps, radix = engine.cfg, engine.manager, engine.cfg.page_size, engine.cfg.rules.pd_radix
    qc.ns["get_disagg"] = lambda: SimpleNamespace(disaggregation_decode_enable_radix_cache=radix)
    qc.ns["get_memory"] = lambda: SimpleNamespace(disable_radix_cache=not radix)
    # The prefill chunks this pass has planned (kvbench-only: a retracted PD request prefilling
    # again) will take their pages first: not free for a prealloc, on either side.
    free = (m.num_free_pages - engine.sched._planned_pages()) * ps
    full = SimpleNamespace(available_size=lambda: free)
    a = SimpleNamespace(page_size=ps, available_size=full.available_size, full_available_size=full.available_size,
                        size_full=cfg.num_pages * ps, full_attn_allocator=full, _swa_req_ring=False)
    swa = m.swa is not None
    if swa:
        s = m.swa.allocator
        a.swa_attn_allocator = SimpleNamespace(available_size=lambda: s.num_free_pages * ps)
        a.swa_available_size = a.swa_attn_allocator.available_size
        a.size_swa = s.num_pages * ps
        a.alloc_extend_swa_tail = None
        for name, fn in qc.swa_alloc.items():
            setattr(a, name, fn.__get__(a))
    for name, fn in qc.alloc.items():
        setattr(a, name, fn.__get__(a))
    evictable = (lambda: m.evictable_pages * ps - pinned[0]) if m.prefix is not None else (lambda: 0)
    tree = SimpleNamespace(evictable_size=evictable, full_evictable_size=evictable,
                           swa_evictable_size=lambda: m.evictable_swa_tokens - pinned[1] if m.prefix is not None else 0)
    q = qc.cls()
    q.token_to_kv_pool = _SWAKVPool() if swa else _Dummy()
    q.token_to_kv_pool_allocator, q.tree_cache = a, tree
    q.num_reserved_decode_tokens = cfg.reserved_decode_tokens
    q.transfer_queue, q.retracted_queue = SimpleNamespace(queue=[]), []
    q.scheduler = SimpleNamespace(
        running_batch=SimpleNamespace(reqs=running), waiting_queue=[], last_batch=None, enable_hisparse=False,
        sliding_window_size=m.mem.window if swa else None, tp_worker=SimpleNamespace(is_hybrid_swa=swa),
        server_args=SimpleNamespace(disaggregation_decode_enable_radix_cache=radix, disable_radix_cache=not radix))
    return q


def sglang_verdict(qc, engine: Engine, b: pd_budget.PDPreallocBudget, r: Request | None, prefix: int = 0,
                   pinned: tuple[int, int] = (0, 0)) -> tuple[bool, int, int | None]:
    """SGLang's verdict on r after b.preallocated preallocs of this pass, and its budgets
    (r None: only the budgets, at the pass's start); prefix: r's decode-radix match, whose
    lock holds ``pinned`` evictable tokens."""
    running = [_sg_req(x) for x in b.running]
    q, radix, k = sglang_queue(qc, engine, running, pinned), engine.cfg.rules.pd_radix, b.preallocated
    retractable = sum(len(x.origin_input_ids) + len(x.output_ids) for x in running)
    tail = q._uses_swa_tail_prealloc()
    retractable_swa = sum(q._swa_retractable_len(x) for x in running) if tail else 0
    if r is None:
        if tail and not qc.new:
            return True, *q._swa_aware_allocatable_token_budgets(
                retractable_tokens=retractable, retractable_swa_tokens=retractable_swa, count_retracted=True)
        return True, 0, None
    req, clip = _sg_req(r), min(r.max_new_tokens, qc.clip)
    if qc.new:  # 0.5.23's pop_preallocated
        swa_alloc = None
        if q._uses_swa_reservation():
            full_alloc, swa_alloc = q._swa_aware_allocatable_token_budgets(
                retractable_tokens=retractable, retractable_swa_tokens=retractable_swa, count_retracted=True)
        else:
            full_alloc = q._allocatable_token_budgets(retractable_tokens=retractable, count_retracted=True)
        if k or radix:  # re-read after each prealloc, and after a decode-radix match
            full_alloc = q._allocatable_token_budgets(retractable_tokens=retractable, count_retracted=True,
                                                      extra_reserved_reqs=k, hicache_reserved_tokens=0)
            if swa_alloc is not None:
                swa_alloc = q._swa_tail_allocatable_token_budget(
                    retractable_tokens=retractable, retractable_swa_tokens=retractable_swa, count_retracted=True,
                    extra_reserved_reqs=k)
        alloc = q._required_alloc_tokens(fill_len=q._pre_alloc_fill_len(req), prefix_len=prefix)
        full_need = q._required_admission_tokens(req, alloc, prefix, retractable)
        swa_need = 0
        if tail:
            _, swa_required = q._prealloc_required_tokens(req)
            _, swa_len = q._prealloc_kv_lens(req)
            swa_need = max(swa_required, swa_len + clip - retractable_swa)
        elif swa_alloc is not None:
            swa_need = full_need
        fits = q._prealloc_reservation_fits(full_need, swa_need, full_allocatable_tokens=full_alloc,
                                            swa_allocatable_tokens=swa_alloc)
        return fits, full_alloc, swa_alloc
    # 0.5.18's: the SWA budget is read once a pass and each prealloc's SWA need taken off it.
    swa_alloc = None
    if tail:
        full_alloc, _ = q._swa_aware_allocatable_token_budgets(
            retractable_tokens=retractable, retractable_swa_tokens=retractable_swa, count_retracted=True)
        swa_alloc = b.sg_swa_start - sum(q._prealloc_required_tokens(x)[1] for x in b.sg_preallocated)
    else:
        full_alloc = q._allocatable_token_budgets(retractable_tokens=retractable, count_retracted=True)
    if k or radix:
        full_alloc = q._allocatable_token_budgets(retractable_tokens=retractable, count_retracted=True,
                                                  extra_reserved_reqs=k, hicache_reserved_tokens=0)
    fill = q._pre_alloc_fill_len(req)
    alloc = q._required_alloc_tokens(fill_len=fill, prefix_len=prefix) if radix else fill
    need = alloc + q.num_reserved_decode_tokens
    fits = max(need, len(r.prompt) - prefix + clip - retractable) <= full_alloc
    if fits and tail:
        _, swa_required = q._prealloc_required_tokens(req)
        _, swa_len = q._prealloc_kv_lens(req)
        fits = max(swa_required, swa_len + clip - retractable_swa) <= swa_alloc
    return fits, full_alloc, swa_alloc


class Compared(NamedTuple):
    checks: int  # budget checks compared with SGLang's
    refused: int  # of them refused
    hits: int  # of them, whose request had a decode-radix hit
    error: str | None  # the run's error (where it stopped)


def compared_checks(qc, reqs, ps, pool, window, reserved, radix, spec, max_context=4096, shared=0,
                    swa_ratio=None) -> Compared:
    """Run the engine, every check compared with SGLang's.
    shared: tokens every prompt starts with (a decode-radix hit once one is in the tree)."""
    kw = dict(window=window, layer_pattern="1:1") if window else {}
    if swa_ratio is not None:
        kw["swa_ratio"] = swa_ratio
    cfg = EngineConfig(spec=spec, page_size=ps, pool_tokens=pool, max_context=max_context, reserved_decode_tokens=reserved,
                       pd_radix=radix, profile="sglang-0.5.23" if qc.new else "sglang-pre-35265", **kw)
    engine = Engine(cfg)
    compared = refused = 0
    fits = pd_budget.PDPreallocBudget.fits

    def checked(b, r, max_new=None, prefix=0, pinned=(0, 0)):
        nonlocal compared, refused, hits
        ours = fits(b, r, max_new, prefix, pinned)
        b.sg_last = r
        if b.empty:  # submit's check of an empty pool of some size, not the node's pools
            return ours
        theirs, full_alloc, swa_alloc = sglang_verdict(qc, engine, b, r, prefix, pinned)
        assert b.full_allocatable(pinned[0]) == full_alloc, (r.rid, b.preallocated, len(b.running))
        if swa_alloc is not None:
            assert b.swa_allocatable(pinned[1]) == swa_alloc
        # The pins are what the tree's own lock then takes (checked in _preallocate, after it).
        m = engine.manager
        expected[r.rid] = (m.evictable_pages * engine.cfg.page_size - pinned[0], m.evictable_swa_tokens - pinned[1])
        hits += prefix > 0
        assert ours == theirs, (r.rid, b.preallocated)
        compared += 1
        refused += not ours
        return ours

    init, charge = pd_budget.PDPreallocBudget.__init__, pd_budget.PDPreallocBudget.charge
    preallocate, expected, hits = Scheduler._preallocate, {}, 0

    def locked_then_preallocated(sched, r, pdb, **kw):
        m = engine.manager
        if r.rid in expected and m.prefix is not None:  # after the match's lock (and release_swa)
            assert (m.evictable_pages * engine.cfg.page_size, m.evictable_swa_tokens) == expected.pop(r.rid), r.rid
        return preallocate(sched, r, pdb, **kw)

    def recorded_init(b, **kw):
        init(b, **kw)
        b.sg_swa_start = sglang_verdict(qc, engine, b, None)[2]  # 0.5.18 reads its SWA budget once a pass
        b.sg_preallocated, b.sg_last = [], None  # this pass's preallocs, as SGLang's requests

    def recorded_charge(b):
        charge(b)
        b.sg_preallocated.append(_sg_req(b.sg_last))

    with pytest.MonkeyPatch.context() as mp:  # undone after each example: wrappers never nest
        mp.setattr(pd_budget.PDPreallocBudget, "__init__", recorded_init)
        mp.setattr(pd_budget.PDPreallocBudget, "fits", checked)
        mp.setattr(pd_budget.PDPreallocBudget, "charge", recorded_charge)
        mp.setattr(Scheduler, "_preallocate", locked_then_preallocated)
        try:
            engine.submit([Request(rid=i, prompt=(list(range(1, shared + 1)) + list(range(i * 10000, i * 10000 + n)))[:n],
                                   max_new_tokens=o, fill_len=n, arrival_step=a) for i, (n, o, a) in enumerate(reqs)])
        except ConfigError:
            assume(False)  # a workload the empty pool cannot take (kvbench refuses it before a step)
        res = engine.run()
    assert res.verdict in ("ok", "pool_exhausted"), res.error
    return Compared(compared, refused, hits, res.error)


@settings(max_examples=30, deadline=None)
@given(reqs=st.lists(st.tuples(st.integers(1, 300), st.integers(1, 120), st.integers(0, 12)), min_size=1, max_size=10),
       ps=st.sampled_from([1, 16, 64]), pool_pages=st.integers(8, 64), window=st.sampled_from([None, 32, 128]),
       reserved=st.sampled_from([0, 16, 128, 512]), radix=st.booleans(), spec=st.sampled_from(["none", "eagle"]),
       shared=st.sampled_from([0, 40, 200]))
@example(reqs=[(200, 64, 0)] * 3, ps=16, pool_pages=32, window=None, reserved=512, radix=False, spec="none", shared=0)
# ps 1 with SWA takes no tail path: the full side reads the smaller pool (available_size).
@example(reqs=[(300, 10, 0), (500, 10, 0)], ps=1, pool_pages=16, window=32, reserved=0, radix=False, spec="none",
         shared=0)
def test_pd_prealloc_verdicts_equal_sglangs(queue_class, reqs, ps, pool_pages, window, reserved, radix, spec, shared):
    pool = pool_pages * max(ps, 64)
    compared_checks(queue_class, reqs, ps, pool, window, reserved, radix, spec, shared=shared)


def test_worked_example(queue_class):
    # pd_budget's docstring: ps 16, R 512, 2048 tokens: two 200-token prompts join, the third waits
    # (refused once per step until one of them finishes).
    checks, refused, *_ = compared_checks(queue_class, [(200, 64, 0)] * 3, 16, 2048, None, 512, False, "none")
    assert refused > 0 and checks == refused + 3


def test_the_wait_for_ever_is_the_releases_own_refusal(queue_class):
    # test_pd_prealloc_refused_vs_sglang.py's wait for ever (ps 16, window 32, 768 tokens, SWA
    # ratio 0.5, R 256, the decode radix cache), every budget check compared with the installed
    # release's own DecodePreallocQueue. Under 0.5.18 the check that refuses request 2 at step 49,
    # while nothing runs, is its budget's own verdict too, so the run stops there.
    got = compared_checks(queue_class, [(289, 9, 0), (211, 40, 0), (280, 18, 0), (15, 10, 1)], 16, 768,
                          32, 256, True, "none", swa_ratio=0.5)
    assert got.checks > 0
    if not queue_class.new:
        assert got.refused >= 1 and got.error.startswith("SGLang waits for ever from step 49")
    else:
        assert got.error is None or "waits for ever" not in got.error


def test_outputs_past_sglangs_4096_clip(queue_class):
    # Both sides count at most 4096 of a request's outputs (CLIP_MAX_NEW_TOKEN), and here the
    # verdict turns on it: when the second request arrives the first runs (retractable 101),
    # so it needs 100 + 4096 - 101 = 4095 against about 9088 - 4095 free: it joins. Counting
    # all 5000 outputs it would need 4999 against about 9088 - 4999, and wait.
    checks, refused, *_ = compared_checks(queue_class, [(100, 5000, 0), (100, 5000, 1)], 16, 9216, None, 512, False,
                                      "none", max_context=8192)
    assert checks == 2 and refused == 0


def test_the_pd_tail_with_the_decode_radix_cache_is_the_releases(queue_class):
    # ps 64, window 32, a 160-token transfer under the installed release's profile: the SWA
    # pages its prealloc takes are the tail SGLang's own _swa_tail_len gives, page-ceiled.
    # Worked: 0.5.23's decode-radix window start is floor_64(160 - 1 - 64) = 64, a 96-token
    # tail (2 pages); 0.5.18's has no radix variant: floor_64(160 - 32) = 128, 32 (1 page).
    cfg = EngineConfig(spec="none", page_size=64, pool_tokens=8192, window=32, layer_pattern="1:1", pd_radix=True,
                       profile="sglang-0.5.23" if queue_class.new else "sglang-pre-35265", reserved_decode_tokens=0)
    engine = Engine(cfg)
    engine.submit([Request(rid=0, prompt=list(range(160)), max_new_tokens=4, fill_len=160)])
    tail = sglang_queue(queue_class, engine, [])._swa_tail_len(160)
    assert tail == (96 if queue_class.new else 32)
    swa = engine.manager.swa.allocator
    before = swa.num_free_pages
    engine.tick()
    assert before - swa.num_free_pages == -(-tail // 64)


def test_the_decode_reservation_default_is_sglangs(sg):
    # --num-reserved-decode-tokens: 0.5.23 declares it in arg_groups/fields/disagg.py, 0.5.18
    # in server_args.py; the engine's reserved_decode_tokens default must be its value.
    from mini_engine.config.options import CORE

    module = "sglang.srt.server_args" if sg.version == "0.5.18" else "sglang.srt.arg_groups.fields.disagg"
    values = [ast.literal_eval(n.value) for n in ast.walk(source(module)) if isinstance(n, ast.AnnAssign)
              and getattr(n.target, "id", None) == "num_reserved_decode_tokens" and n.value is not None]
    assert values, f"{module} no longer declares num_reserved_decode_tokens"
    assert next(o.default for o in CORE if o.name == "reserved_decode_tokens") == values[0] == 512


@pytest.mark.parametrize("ps", [1, 16])
def test_a_decode_radix_hit_is_budgeted_as_sglang(queue_class, ps):
    # Three arrivals sharing a 200-token prompt, each after the one before finished: the later
    # ones hit the tree (192 tokens at ps 16), their lock takes those tokens out of the
    # evictable part of the budget, and they need only the pages past the hit. Worked at ps
    # 16, 512 tokens, 128 reserved: the second arrival finds 256 free and the first's 256 in
    # the tree, 192 of them locked by its hit: 320 allocatable. It needs 256 - 192 + 128 = 192
    # and joins; counted without its hit (384) it would wait, counted without the lock
    # (512 allocatable) the budget would be another.
    checks, refused, hits, _ = compared_checks(queue_class, [(250, 8, 0), (250, 8, 12), (260, 8, 24)], ps, 512, None, 128,
                                      True, "none", shared=200)
    assert hits == 2 and checks >= 3
