"""SGLang's ``batch_is_full`` (mini_engine/scheduler/batch_full.py) against SGLang 0.5.23's own scheduler code.

``Scheduler.get_next_batch_to_run``, ``get_new_batch_prefill``, ``_get_new_batch_prefill_raw``
and ``get_num_allocatable_reqs`` are compiled from the installed source and run as a shadow
scheduler beside an engine under ``admission = "sglang"``: before every kvbench admission the
shadow takes the engine's pool (tokens free, request rows), its waiting queue and its
continuing chunked request, and runs SGLang's step with SGLang's own adder
(test_prefill_adder_vs_sglang.py's classes). Its running batch and flag are its own, carried
from step to step: SGLang's filters and merges decide when the flag clears, SGLang's pass
when it is set and what it skips. The stand-ins are the GPU parts: the batch (requests
only: filter, merge, forward mode), the decode step (``update_running_batch``: kvbench
decodes; a request kvbench retracts leaves the shadow's batch and clears the flag, as
retract_decode's shrink does there) and the tree (it matches nothing: prompts are distinct).

Each step the batch SGLang forms (requests, chunk bounds) must equal kvbench's, and the
flag kvbench keeps must equal SGLang's after the pass.
"""

from __future__ import annotations

import typing
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.request import Request, Status
from sglang_source import methods
from suites.unit.conform.test_prefill_adder_vs_sglang import _Req, adder_classes  # noqa: F401 (the fixture)

MAX_PREFILL_TOKENS = 16384
_STEPS = {"get_next_batch_to_run", "get_new_batch_prefill", "_get_new_batch_prefill_raw",
          "get_num_allocatable_reqs"}


class _Mode:
    def __init__(self, extend: bool):
        self.extend = extend

    def is_extend(self) -> bool:
        return self.extend


class _Batch:
    """ScheduleBatch's request-level behaviour: filter_batch drops finished and excluded requests."""

    def __init__(self, reqs=(), batch_is_full=False, extend=False, chunked_req=None):
        self.reqs = list(reqs)
        self.batch_is_full = batch_is_full
        self.forward_mode = _Mode(extend)
        self.chunked_req = chunked_req
        self.is_prefill_only = False

    @classmethod
    def init_new(cls, reqs, *_, chunked_req=None, **__):
        return cls(reqs, extend=True, chunked_req=chunked_req)

    def is_empty(self) -> bool:
        return not self.reqs

    def batch_size(self) -> int:
        return len(self.reqs)

    def filter_batch(self, reqs_to_exclude=None):
        out = reqs_to_exclude or []
        self.reqs = [r for r in self.reqs if not r.finished() and r not in out]

    def merge_batch(self, other) -> None:
        self.reqs.extend(other.reqs)

    def prepare_for_extend(self) -> None:
        pass


class _Shadow(_Req):
    """A kvbench request as SGLang's Req: finished() and the outputs read the engine's."""

    def __init__(self, r: Request):
        super().__init__(r.rid, len(r.prompt), r.max_new_tokens)
        self.src = r
        self.beam_group = self.token_indices_to_pool = None
        self.inflight_middle_chunks = 0
        self.time_stats = SimpleNamespace()

    def sync(self, prefilled: int = 0, target: int | None = None) -> None:
        """From kvbench's request: a target for the chunked request (it holds its row), else waiting."""
        r = self.src
        self.kv.holds_kv = target is not None
        self.kv.req_pool_idx = 1 if target is not None else None
        self.origin_input_ids = list(r.prompt)
        self.full_untruncated_fill_ids = (list(r.prompt) + list(r.outputs))[:target]
        self.prefix_len = self.extend_end = prefilled

    # The engine's outputs at every read: a request of the last prefill batch (merged into the
    # running batch inside get_next_batch_to_run) already holds the first output SGLang's
    # prefill result appended, except under overlap, where that result is processed after
    # the next batch is formed (lag: the outputs SGLang has not appended yet).
    lag = 0

    @property
    def output_ids(self) -> list[int]:
        outs = self.src.outputs
        return list(outs[: len(outs) - self.lag])

    @output_ids.setter
    def output_ids(self, value) -> None:
        pass

    def finished(self) -> bool:
        return self.src.status is Status.FINISHED

    def init_next_round_input(self, tree_cache=None) -> None:
        pass  # no prefix to match; the chunked request's progress was synced from kvbench


def _shadow_scheduler(sgc, ps: int, chunk: int, cache: str, max_running: int, engine: Engine):
    m, sched = engine.manager, engine.sched
    ns = {"Optional": typing.Optional, "Tuple": typing.Tuple, "List": typing.List, "Union": typing.Union,
          "ScheduleBatch": _Batch, "Req": _Req, "PrefillDelayerSinglePassExecutor": object,
          "NextBatchPlan": lambda batch_to_run, running_batch: SimpleNamespace(
              batch_to_run=batch_to_run, running_batch=running_batch),
          "AddReqResult": sgc.result, "TEST_RETRACT": False, "TEST_RETRACT_NO_PREFILL_BS": 0,
          "get_schedule": lambda: SimpleNamespace(prefill_max_requests=None),
          "get_parallel": lambda: SimpleNamespace(pp_max_micro_batch_size=max_running),
          "set_time_batch": lambda *a: None, "set_schedule_time_batch": lambda *a: None,
          "PrefillStats": SimpleNamespace(from_adder=lambda *a, **k: None)}
    methods("sglang.srt.managers.scheduler", "Scheduler", _STEPS, ns)
    tree = SimpleNamespace(disable=cache == "chunk", supports_mamba=lambda: False,
                           supports_prefix_sharing=lambda: cache == "radix",
                           evictable_size=lambda: m.evictable_pages * ps,
                           lock=lambda node: None, unlock=lambda lock: None, buffer_pipeline=None,
                           storage_prefetch_retries=None,
                           finish_storage_prefetch_admission=lambda *a, **k: None,
                           discard_storage_prefetch_accounting=lambda *a: None)
    alloc = SimpleNamespace(page_size=ps, available_size=lambda: m.num_free_pages * ps,
                            request_slot_reserve=lambda **k: 0)
    alloc.create_prefill_budget = lambda t, num_mixed_decode_tokens=0: sgc.budget(
        alloc, t, num_mixed_decode_tokens=num_mixed_decode_tokens)

    def update_running_batch(self, batch):  # kvbench decodes; prepare_for_decode's mode only
        batch.forward_mode = _Mode(False)
        return batch

    stubs = {
        "process_pending_chunked_abort": lambda self: None, "_process_hicache_events": lambda self: None,
        "stash_chunked_request": lambda self, req: None, "_should_defer_prefill": lambda self, b: False,
        "_arm_prefill_decode_interval": lambda self, b: None, "update_running_batch": update_running_batch,
        "get_prefill_adder_class": lambda self: sgc.adder, "_add_request_to_queue": lambda self, r: None,
    }
    cls = type("ShadowScheduler", (), {**{n: ns[n] for n in _STEPS}, **stubs})
    s = cls()
    s.__dict__.update(
        dllm_config=None, enable_hisparse=False, require_mlp_sync=False, enable_priority_preemption=False,
        is_hybrid_swa=False, min_free_slots_delayer=None, prefill_delayer=None, dynamic_chunk_sizer=None,
        enable_lora=False, enable_priority_scheduling=False, enable_hicache_storage=False, enable_lmcache=False, is_mixed_chunk=False,
        enable_hierarchical_cache=False, enable_unified_cache_external_linker=False, enable_overlap=True,
        chunked_req=None, waiting_queue=[], page_size=ps, chunked_prefill_size=chunk, tree_cache=tree,
        token_to_kv_pool_allocator=alloc, max_prefill_tokens=MAX_PREFILL_TOKENS, max_prefill_bs=1 << 30,
        max_running_requests=max_running, priority_scheduling_preemption_threshold=10,
        truncation_align_size=None, processed_tokens_counter=None, hisparse_coordinator=None,
        req_to_token_pool=SimpleNamespace(available_size=lambda: max_running - len(sched.running)),
        beam_coordinator=SimpleNamespace(pending_member_rows=lambda batch: 0),
        grammar_manager=SimpleNamespace(has_waiting_grammars=lambda: False),
        policy=SimpleNamespace(calc_priority=lambda *a, **k: None,
                               shortest_prefill_chunk_limit=lambda *a: None),
        new_token_ratio_tracker=SimpleNamespace(current=0.7),
        tp_worker=SimpleNamespace(model_runner=SimpleNamespace(attn_backend=None, prefill_aware_swa=False)),
        dp_attn_adapter=SimpleNamespace(maybe_prepare_mlp_sync_batch=lambda b, need_sync=True: b,
                                        maybe_convert_decode_to_extend=lambda b: b),
        ngram_embedding_manager=SimpleNamespace(prepare_for_forward=lambda b, chunked_req=None: b),
        load_inquirer=SimpleNamespace(_get_num_pending_tokens=lambda **k: 0),
        model_config=None, spec_algorithm=SimpleNamespace(is_none=lambda: True))
    return s


def run_side_by_side(sgc, reqs, ps: int, chunk: int, pool: int, cache: str, max_running: int,
                     overlap: bool) -> tuple[int, int]:
    """Run the engine with the shadow beside it. Returns (steps compared, steps the flag kept shut)."""
    cfg = EngineConfig(spec="none", page_size=ps, pool_tokens=pool, chunked_prefill=chunk, prefix_cache=cache,
                       max_running=max_running, max_context=8192, admission="sglang", overlap=overlap)
    engine = Engine(cfg)
    engine.submit(reqs)
    sched = engine.sched
    s = _shadow_scheduler(sgc, ps, chunk, cache, max_running, engine)
    shadow = {r.rid: _Shadow(r) for r in reqs}
    state = {"running": _Batch(), "last": None, "steps": 0, "shut": 0}
    admit = sched.admit

    def checked_admit():
        running = state["running"]
        # update_running_batch's retraction (kvbench's decode step): the batch shrinks, the flag clears.
        kept = [q for q in running.reqs if q.src.status is not Status.WAITING]
        if len(kept) < len(running.reqs):
            running.reqs, running.batch_is_full = kept, False
        chunked = next((r for r in sched.running if r.prefilling), None)
        if chunked is None:
            s.chunked_req = None
        else:
            s.chunked_req = shadow[chunked.rid]
            s.chunked_req.sync(chunked.prefilled, chunked.prefill_target)
        for r in sched.waiting:
            shadow[r.rid].sync()
        s.waiting_queue = [shadow[r.rid] for r in sched.waiting]
        last = state["last"]
        for q in shadow.values():
            q.lag = 0
        if overlap and last is not None and last.forward_mode.is_extend():
            for q in last.reqs:  # a prefill that ended in that batch: its first output is in flight
                q.lag = int(q.extend_end == len(q.origin_input_ids) + len(q.src.outputs) - 1 and bool(q.src.outputs))
        plan = s.get_next_batch_to_run(running_batch=running, last_batch=last)
        chunks, pd = admit()
        state["running"] = plan.running_batch
        batch = plan.batch_to_run
        theirs = [(q.rid, q.prefix_len, q.extend_end) for q in batch.reqs] \
            if batch is not None and batch.forward_mode.is_extend() else []
        ours = [(c.req.rid, c.start, c.end) for c in chunks]
        if not theirs and not ours and not plan.running_batch.reqs and s.waiting_queue:
            # An empty engine whose head SGLang refuses: kvbench tries it anyway (admission_gate);
            # the shadow follows kvbench's batch from here.
            return chunks, pd
        assert ours == theirs, f"step {engine.step_no}"
        assert sched.gate.full == plan.running_batch.batch_is_full, f"step {engine.step_no}"
        state["last"] = batch
        state["steps"] += 1
        state["shut"] += plan.running_batch.batch_is_full and bool(sched.waiting)
        return chunks, pd

    sched.admit = checked_admit
    res = engine.run()
    assert res.verdict == "ok", res.error
    return state["steps"], state["shut"]


def _reqs(spec) -> list[Request]:
    return [Request(rid=i, prompt=list(range(i * 10000, i * 10000 + n)), max_new_tokens=o, arrival_step=a)
            for i, (n, o, a) in enumerate(spec)]


def test_worked_example_waits_for_a_leave(adder_classes):  # noqa: F811
    # ps 16, 256 tokens, no tree: A and B of 64 prompt + 100 outputs (test_batch_full.py's
    # example). Every pass from A's (step 0) to step 99, where A finishes, ends with B refused
    # and the flag up, in SGLang's scheduler as in kvbench; B joins at step 100 and finishes at
    # step 199.
    steps, shut = run_side_by_side(adder_classes, _reqs([(64, 100, 0), (64, 100, 0)]), 16, 256, 256,
                                   "chunk", 64, overlap=False)
    assert (steps, shut) == (200, 100)


@settings(max_examples=40, deadline=None)
@given(spec=st.lists(st.tuples(st.integers(1, 900), st.integers(2, 400), st.integers(0, 40)), min_size=1, max_size=10),
       ps=st.sampled_from([1, 16, 64]), chunk_pages=st.integers(2, 24), pool_pages=st.integers(20, 80),
       cache=st.sampled_from(["radix", "chunk"]), max_running=st.sampled_from([2, 3, 64]),
       overlap=st.booleans())
def test_flag_and_batches_equal_sglangs(adder_classes, spec, ps, chunk_pages, pool_pages, cache,  # noqa: F811
                                        max_running, overlap):
    chunk = chunk_pages * max(ps, 16)
    pool = pool_pages * max(ps, 32)
    # Every request fits the pool alone, with SGLang's page of slack: the run finishes.
    spec = [(n, o, a) for n, o, a in spec if n + o + 2 * max(ps, 16) < pool] or [(10, 10, 0)]
    run_side_by_side(adder_classes, _reqs(spec), ps, chunk, pool, cache, max_running, overlap)


def test_the_last_prefill_batch_counts_its_first_output(adder_classes):  # noqa: F811
    # ps 16, 768 tokens, no tree (a case hypothesis found): request 1 (1 prompt, 2 outputs) is
    # prefilled at step 2 and owes one output at step 3, when request 3 (335 + 400) arrives.
    # The finish simulation leaves 752 - 352 + 2 - 400 = 2 > 1 token: it joins, in SGLang's
    # scheduler as in kvbench (request 1 is in the running batch only after the merge).
    spec = [(1, 2, 0), (1, 2, 2), (1, 322, 7), (335, 400, 3), (31, 74, 40)]
    steps, _ = run_side_by_side(adder_classes, _reqs(spec), 16, 384, 768, "chunk", 64, overlap=False)
    assert steps > 3
