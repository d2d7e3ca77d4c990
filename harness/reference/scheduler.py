"""The stand-in object SGLang's own Scheduler methods run on (the reference loop).

``Scheduler.__init__`` starts a model worker, ZMQ sockets and process groups. The
reference engine instead binds the methods that form batches and run the loop (REAL,
SGLang's functions themselves, decorators unwrapped) to this class, and gives them
SGLang's own components: a ``ReqToTokenPool``, the paged (or token, ps 1) allocator,
``UnifiedRadixCache`` with the FULL component (``disable`` for the chunk cache, as
``--disable-radix-cache`` does), the server's ``SchedulePolicy`` and
``NewTokenRatioTracker.from_config()``, and ``SchedulerBatchResultProcessor`` for the
results. What the loop reaches but this path never uses (metrics, output streaming,
grammar, LoRA, HiCache, data parallelism) is an inert stand-in named in ``_inert``.
The four methods written here are the loop's edges: requests arriving
(``ingest_requests``), the forward (``run_batch``: forward.py), the result dispatch
(``process_batch_result``: SGLang's, without its metrics and load publishing) and the
exit condition (``gracefully_exit``, read at the top of every iteration).
"""

from __future__ import annotations

import inspect
from types import SimpleNamespace

from harness.reference import pd_decode

# SGLang's Scheduler methods the reference runs as they are.
REAL = ("event_loop_normal", "event_loop_overlap", "get_next_batch_to_run", "get_new_batch_prefill",
        "_get_new_batch_prefill_raw", "get_num_allocatable_reqs", "update_running_batch",
        "_reqs_finishing_inflight", "stash_chunked_request", "get_prefill_adder_class",
        "is_disable_overlap_for_batch", "process_pending_chunked_abort", "_process_hicache_events",
        "_should_defer_prefill", "_arm_prefill_decode_interval")


class _Inert:
    """A component the loop calls only for metrics, streaming or features that are off."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *a, **k: None


class _Metrics(_Inert):
    """SGLang's metrics reporter with metrics off: the counters the loop adds to, nothing logged."""

    enable_metrics = False

    def __init__(self):
        self.num_generated_tokens = self.forward_ct_decode = self.num_retracted_reqs = 0


def scheduler_class(sg):
    """A class holding SGLang's REAL Scheduler methods and the loop's four edges."""
    Scheduler = sg.scheduler.Scheduler
    body = {name: inspect.unwrap(getattr(Scheduler, name)) for name in (*REAL, *pd_decode.REAL)
            if hasattr(Scheduler, name)}

    def ingest_requests(self, stop_at_pause: bool = False):
        self.driver.arrive(self)
        return []

    def run_batch(self, batch, pp_proxy_tensors=None):
        return self.driver.forward(self, batch)

    def process_batch_result(self, batch, result):
        # Scheduler.process_batch_result's dispatch for this path (generation, no PD prefill side).
        if batch.forward_mode.is_decode():
            self.batch_result_processor.process_batch_result_decode(batch, result)
        elif batch.forward_mode.is_extend():
            self.batch_result_processor.process_batch_result_prefill(batch, result)
        self.driver.landed(self, batch)

    def _add_request_to_queue(self, req, is_retracted: bool = False):
        # Scheduler._add_request_to_queue without a queue limit or a storage prefetch:
        # the request joins the waiting queue, or on a PD decode node the prealloc queue.
        if is_retracted:
            self.driver.retracted(req)
        if self.disaggregation_mode == sg.scheduler.DisaggregationMode.DECODE:
            self.disagg_decode_prealloc_queue.add(req, is_retracted=is_retracted)
        else:
            self.waiting_queue.append(req)

    def last_batch_set(self, batch):
        self.__dict__["last_batch"] = batch
        self.driver.iteration_done(self, batch)

    body.update(
        ingest_requests=ingest_requests, run_batch=run_batch, process_batch_result=process_batch_result,
        _add_request_to_queue=_add_request_to_queue,
        gracefully_exit=property(lambda self: self.driver.done(self)),
        last_batch=property(lambda self: self.__dict__.get("last_batch"), last_batch_set),
        # 0.5.18's loop receives through a request receiver, then processes what it got.
        process_input_requests=lambda self, reqs: None,
        # 0.5.18's batch forming aborts requests past their timeouts; none is set here.
        _abort_on_waiting_timeout=lambda self: None, _abort_on_running_timeout=lambda self, batch: None,
        on_idle=lambda self: None, _apply_war_barrier=lambda self: None,
        launch_batch_sample_if_needed=lambda self, result, batch: None,
        send_abort_output=lambda self, *a, **k: None,
    )
    return type("ReferenceScheduler", (), body)


def _inert() -> dict:
    inert = _Inert()
    return dict(metrics_reporter=_Metrics(), output_streamer=inert, grammar_manager=SimpleNamespace(
        has_waiting_grammars=lambda: False), beam_coordinator=SimpleNamespace(
        pending_member_rows=lambda batch: 0, retire_group=lambda req: None, commit_decode=lambda batch: set()),
        dp_attn_adapter=SimpleNamespace(maybe_prepare_mlp_sync_batch=lambda b, need_sync=True: b,
                                        maybe_convert_decode_to_extend=lambda b: b),
        ngram_embedding_manager=SimpleNamespace(prepare_for_forward=lambda b, chunked_req=None: b),
        load_inquirer=SimpleNamespace(_get_num_pending_tokens=lambda **k: 0),
        tp_worker=SimpleNamespace(model_runner=SimpleNamespace(attn_backend=None, prefill_aware_swa=False)),
        hisparse_coordinator=None, decode_offload_manager=None, processed_tokens_counter=None,
        dynamic_chunk_sizer=None, prefill_delayer=None, dllm_config=None, truncation_align_size=None,
        _pending_chunked_abort_req=None, _engine_paused=False, _prefill_decode_interval_remaining=0,
        prefill_decode_interval=0, prefill_decode_interval_min_bs=0,
        enable_fpm=False)  # 0.5.18: the forward-pass metrics timer


def build(sg, driver, *, ps: int, num_pages: int, max_running: int, max_context: int, chunk: int,
          radix: bool, overlap: bool, vocab_size: int, spec=None, swa: tuple[int, int] | None = None,
          pd_reserved: int | None = None, pd_radix: bool = False):
    """A ReferenceScheduler over fresh SGLang components for one run (spec: spec.Spec, None
    for plain decoding; swa: the SWA pool's pages and the window, for a hybrid SWA model;
    pd_reserved: a PD decode node's num_reserved_decode_tokens, pd_radix: its radix cache, pd_decode.py)."""
    torch = sg.torch
    args = sg.server_args.ServerArgs(model_path="dummy", device="cpu", page_size=ps,
                                     chunked_prefill_size=chunk,
                                     max_running_requests=max_running, disable_radix_cache=not radix,
                                     disable_overlap_schedule=not overlap, schedule_policy="fcfs",
                                     **(spec.server_args if spec else {}), **_pd_args(pd_reserved, pd_radix))
    args._mamba_cache_chunk_size = 64  # as SGLang's CPU fixtures: no Hugging Face lookup of the dummy model
    sg.context.reset_context()
    sg.context.publish(args, role="scheduler")
    # Scheduler.__init__'s default for the micro batch bound get_num_allocatable_reqs reads.
    sg.context.get_context().override("scheduler.pp_max_micro_batch_size_default",
                                      pp_max_micro_batch_size=max_running)
    # The row: the context and SGLang's headroom for the decode over-allocation (_init_pools).
    row_len = max_context + sg.sizing.get_req_to_token_extra_context_len()
    rows = (sg.pool.ReqToTokenPool(size=max_running, device="cpu", enable_memory_saver=False, max_context_len=row_len)
            if pd_reserved is None else pd_decode.request_pool(sg, max_running=max_running, max_context_len=row_len))
    bigram = bool(spec and spec.bigram)
    if swa is not None:  # SGLang's SWA allocator over both pools, the FULL + SWA tree
        alloc, tree = sg.serving.build(num_pages, swa[0], ps, swa[1], bigram, req_to_token_pool=rows,
                                       disable=not radix)
    else:
        if ps == 1:
            alloc = sg.token.TokenToKVPoolAllocator(num_pages, torch.int64, "cpu", None, False)
        else:
            alloc = sg.paged.PagedTokenToKVPoolAllocator(num_pages * ps, ps, torch.int64, "cpu", None, False)
        tree = sg.serving.tree(alloc, ps, (sg.serving.FULL,), bigram, req_to_token_pool=rows, disable=not radix)
    model_config = SimpleNamespace(vocab_size=vocab_size, num_key_value_heads=1, is_encoder_decoder=False,
                                   is_multimodal=False, hf_eos_token_id=None,
                                   self_opened_think_start_ids=None, think_end_id=None,
                                   think_end_ids=None)  # 0.5.18's name
    s = scheduler_class(sg)()
    s.__dict__.update(_inert())
    s.__dict__.update(
        driver=driver, req_to_token_pool=rows, token_to_kv_pool_allocator=alloc, tree_cache=tree,
        model_config=model_config, page_size=ps, chunked_prefill_size=chunk,
        max_prefill_tokens=args.max_prefill_tokens,
        max_running_requests=max_running, max_prefill_bs=0, enable_overlap=overlap, enable_overlap_mlx=False,
        spec_algorithm=sg.spec.SpeculativeAlgorithm.from_string(args.speculative_algorithm), is_generation=True,
        require_mlp_sync=False, enable_hisparse=False, enable_priority_preemption=False,
        enable_priority_scheduling=False, is_hybrid_swa=swa is not None, is_mixed_chunk=False, enable_lora=False,
        enable_hicache_storage=False, enable_lmcache=False, enable_hierarchical_cache=False,
        enable_unified_cache_external_linker=False, enable_unified_memory=False, enable_skip_finishing_decode=False,
        priority_scheduling_preemption_threshold=args.priority_scheduling_preemption_threshold,
        chunked_req=None, waiting_queue=[], running_batch=sg.batch.ScheduleBatch(reqs=[], batch_is_full=False),
        cur_batch_for_debug=None, _sched_idled=False, forward_ct=0,
        disaggregation_mode=sg.scheduler.DisaggregationMode.NULL if pd_reserved is None else
        sg.scheduler.DisaggregationMode.DECODE, server_args=args,
        policy=sg.policy.SchedulePolicy("fcfs", tree, False, False, False),
        new_token_ratio_tracker=sg.ratio.NewTokenRatioTracker.from_config())
    s.request_receiver = SimpleNamespace(recv_requests=s.ingest_requests)  # 0.5.18's arrivals
    # Scheduler.__init__'s admission delay: DFLASH waits for a few free request slots.
    slots = sg.scheduler.resolve_min_free_slots(sg.context.get_schedule().min_free_slots_delay, max_running,
                                                is_dflash_family=s.spec_algorithm.is_dflash_family())
    s.min_free_slots_delayer = None if slots is None else sg.scheduler.MinFreeSlotsDelayer(min_free_slots=slots)
    s.batch_result_processor = _made(
        sg.processor.SchedulerBatchResultProcessor, server_args=args, is_generation=True, disaggregation_mode=s.disaggregation_mode, enable_overlap=overlap,
        enable_overlap_mlx=False, model_config=model_config, token_to_kv_pool_allocator=alloc, tree_cache=tree,
        hisparse_coordinator=None, req_to_token_pool=rows, decode_offload_manager=None,
        metrics_collector=_Inert(), metrics_reporter=s.metrics_reporter, draft_worker=None, model_worker=_Inert(),
        logprob_result_processor=_Inert(), output_streamer=_Inert(), beam_coordinator=s.beam_coordinator,
        abort_request=lambda *a, **k: None)
    if pd_reserved is not None:
        pd_decode.attach(sg, s, driver, reserved=pd_reserved, window=swa[1] if swa is not None else None)
    return s


def _pd_args(reserved: int | None, radix: bool) -> dict:
    """A PD decode node's server arguments: SGLang's fake transfer backend (pd_decode.py).
    SGLang refuses its decode radix cache beside the fake backend (handle_pd_disaggregation),
    so with it the server names a real backend; every request still takes the fake
    transfer (the fake bootstrap host) and the KV manager is the fake one either way."""
    if reserved is None:
        return {}
    backend = "mooncake" if radix else "fake"
    return dict(disaggregation_mode="decode", disaggregation_transfer_backend=backend,
                num_reserved_decode_tokens=reserved, disaggregation_decode_enable_radix_cache=radix)


def _made(cls, **kwargs):
    """cls(**kwargs) with the arguments this release's cls takes (0.5.18's result processor
    takes the server args and no beam coordinator)."""
    taken = inspect.signature(cls).parameters
    return cls(**{k: v for k, v in kwargs.items() if k in taken})
