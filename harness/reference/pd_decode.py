"""The decode side of PD disaggregation on the reference loop: SGLang's own queues.

A decode node (``--disaggregation-mode decode``) runs ``event_loop_normal_disagg_decode``
(or its overlap variant): every iteration ``process_decode_queue`` resumes retracted
requests, ``DecodePreallocQueue.pop_preallocated`` preallocates the waiting arrivals'
KV under the decode prealloc budget (``_allocatable_token_budgets``, ``_pre_alloc``) and
hands them to ``DecodeTransferQueue``, whose ``pop_transferred`` moves the ones whose
KV has arrived to the waiting queue; ``get_next_disagg_decode_batch_to_run`` builds
them a prebuilt batch (``prepare_for_prebuilt``, ``process_prebuilt``: the checkpoint),
merges it into the running batch and decodes. All of that is SGLang's code, bound here.

The KV transfer stands in as SGLang's own fake transfer backend does it (its
``FakeKVReceiver``, chosen per request by the fake bootstrap host): the receiver
concludes on its first poll after the prealloc sent the metadata, so a request
preallocated in an iteration is transferred, prebuilt and decoding in that same
iteration; the mini engine assumes the same (its transfer lands at once,
mini_engine/scheduler/pd_prealloc.py). The KV manager (``_init_kv_manager``: the
transfer engine's registration of device buffers) is SGLang's ``FakeKVManager`` with no
buffers. The token the prefill node sampled (the handoff, ``_commit_transfer_to_req``)
is the request's first recorded output, as the mini engine's transfer gives it. With
the decode radix cache the server names a real backend (SGLang refuses that cache beside
the fake one) while every request still takes the fake transfer (scheduler._pd_args).
"""

from __future__ import annotations

import importlib
from types import SimpleNamespace

# SGLang's decode-side Scheduler methods (SchedulerDisaggregationDecodeMixin) the reference runs.
REAL = ("event_loop_normal_disagg_decode", "event_loop_overlap_disagg_decode", "get_next_disagg_decode_batch_to_run",
        "get_new_prebuilt_batch", "_get_new_prebuilt_batch", "_verify_kv_checksums", "process_decode_queue")
HIDDEN = 16  # the metadata buffers' hidden size without a draft model carrying hidden states (Scheduler)


def modules() -> SimpleNamespace:
    names = {"decode": "disaggregation.decode", "utils": "disaggregation.utils", "fake": "disaggregation.fake.conn",
             "base": "disaggregation.base.conn"}
    return SimpleNamespace(**{k: importlib.import_module(f"sglang.srt.{v}") for k, v in names.items()})


def extra_slots(max_running: int) -> int:
    """The decode pool's rows for requests in transfer beyond max_running: SGLang's
    default (handle_pd_disaggregation, one DP rank): twice a batch of at most 32, else none."""
    return 2 * max_running if max_running <= 32 else 0


def request_pool(sg, *, max_running: int, max_context_len: int):
    """DecodeReqToTokenPool: max_running rows, and extra_slots more for preallocated requests."""
    return modules().decode.DecodeReqToTokenPool(size=max_running, max_context_len=max_context_len, device="cpu",
                                                 enable_memory_saver=False, pre_alloc_size=extra_slots(max_running))


def attach(sg, s, driver, *, reserved: int, window: int | None = None) -> None:
    """Give the scheduler ``s`` SGLang's decode-side queues and the methods that drive them
    (window: a hybrid SWA model's sliding window)."""
    m = modules()
    torch = sg.torch
    size = s.req_to_token_pool.size * 2  # Scheduler: *2 headroom (not a MiniMax sparse model)
    idx = m.utils.ReqToMetadataIdxAllocator(size)
    buffers = m.utils.MetadataBuffers(size, hidden_size=HIDDEN, hidden_states_dtype=torch.float32,
                                      max_sampling_mask_tokens=s.server_args.sampling_mask_max_tokens)

    class TransferQueue(m.decode.DecodeTransferQueue):
        def pop_transferred(self, rids_to_check=None):
            reqs = super().pop_transferred(rids_to_check)
            for req in reqs:
                driver.handed_off(req)
            return reqs

    class PreallocQueue(m.decode.DecodePreallocQueue):
        def _init_kv_manager(self):
            args = m.base.KVArgs()
            # The state a transfer carries beside the KV pages: a hybrid SWA model's window.
            args.state_types = [m.base.StateType.SWA] if window is not None else []
            return m.fake.FakeKVManager(args, s.disaggregation_mode, s.server_args)

    # One rank: the queues all-reduce their poll flags over the TP group's CPU group, a
    # gloo group of one process here (all_reduce_flags returns the flags as they are).
    dist = torch.distributed
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    sg.context.get_parallel().override_permanently(attn_tp_group=SimpleNamespace(cpu_group=dist.group.WORLD),
                                                   tp_rank=0, pp_rank=0, attn_tp_rank=0, dp_rank=0)
    # The overlap relay (FutureMap) and the CUDA streams carry the forward's inputs and
    # order its kernels; the stand-in forward reads neither (driver.py).
    s.__dict__.update(random_seed=0, kv_checksum_computer=None, enable_decode_hicache=False,
                      future_map=SimpleNamespace(stash=lambda *a, **k: None, publish=lambda *a, **k: None),
                      schedule_stream=SimpleNamespace(wait_stream=lambda other: None), forward_stream=None)
    s.tp_worker.is_hybrid_swa = window is not None
    alloc = s.token_to_kv_pool_allocator
    if window is not None:
        # The decode side takes its SWA tail path (_uses_swa_tail_prealloc, ps > 1) for
        # SGLang's SWAKVPool: the CPU stand-in pool (conform's, with no KV buffers) is
        # given that class too; the path reads only its full -> SWA index map.
        swa_pool = importlib.import_module("sglang.srt.mem_cache.swa_memory_pool").SWAKVPool
        kv = alloc.get_kvcache()
        kv.__class__ = type("MapOnlySWAKVPool", (type(kv), swa_pool), {})
        s.tp_worker.model_runner.swa_max_total_num_tokens = alloc.size_swa
        s.sliding_window_size = window
    s.tp_worker.model_runner.kv_cache_dtype_str = "auto"
    s.disagg_metadata_buffers, s.req_to_metadata_buffer_idx_allocator = buffers, idx
    s.disagg_decode_transfer_queue = TransferQueue(req_to_metadata_buffer_idx_allocator=idx, metadata_buffers=buffers,
                                                   scheduler=s, tree_cache=s.tree_cache)
    s.disagg_decode_prealloc_queue = PreallocQueue(
        req_to_token_pool=s.req_to_token_pool, token_to_kv_pool_allocator=s.token_to_kv_pool_allocator,
        draft_token_to_kv_pool=None, req_to_metadata_buffer_idx_allocator=idx, metadata_buffers=buffers,
        scheduler=s, transfer_queue=s.disagg_decode_transfer_queue, tree_cache=s.tree_cache, gpu_id=0,
        bootstrap_port=0, max_total_num_tokens=s.token_to_kv_pool_allocator.size, num_reserved_decode_tokens=reserved,
        transfer_backend=m.utils.TransferBackend.FAKE)


def fake_host() -> str:
    """The bootstrap host that makes SGLang pick its fake transfer for a request (_is_fake_transfer)."""
    return modules().utils.FAKE_BOOTSTRAP_HOST
