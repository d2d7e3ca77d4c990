"""The decode step's SWA window eviction, between the retraction and the allocation.

The scheduler's reserve_decode calls it once the step is known to fit; it reads only the
KV manager and the batch's requests.
"""

from __future__ import annotations

import numpy as np

from mini_engine.memory.sizing import swa_evict_due
from mini_engine.request import Request


def evict_window(mgr, batch: list[Request], lag: np.ndarray | None = None) -> None:
    """SGLang's maybe_evict_swa in prepare_for_decode, after update_running_batch's
    retraction and before the allocation: one free group, and only from a request's
    second decode batch on (decode_batch_idx >= 1: the first may overlap its prefill).

    Its pre_len is req.seqlen - 1, prompt plus output_ids less one: the committed
    length, less the tokens committed but not yet in output_ids (lag: plain decode
    under overlap, whose in-flight token alloc_for_decode committed; DecodeStep)."""
    if mgr.swa is None:
        return
    # The interval rule over the batch in one pass; evict_swa decides the rest, for those only.
    rows = np.fromiter((r.kv.row for r in batch), dtype=np.int64, count=len(batch))
    kv = mgr.rows
    pre = kv.committed[rows] if lag is None else kv.committed[rows] - lag[rows]
    due = swa_evict_due(pre, kv.swa_evicted[rows], mgr.mem.window, mgr.rules.swa_eviction_interval)
    with mgr.free_group():
        for i in np.flatnonzero(due).tolist():
            r = batch[i]
            if r.decode_batches:
                mgr.evict_swa(r.kv, int(pre[i]))
