"""Verify and the drafters' forwards through plain decode's compiled layers (decode_layers).

A few-queries forward (a verify chain, a drafter's context update or DFLASH block) is
plain decode with more rows: query i of a sequence sees a prefix of that sequence's
slot row. A causal query sees the keys up to its own position; a query of a block
whose mask is all ones (DFLASH's non-causal block) sees the whole row. Each query then
becomes one decode row of its own, with its sequence's page table, its own length
and its own RoPE position; decode_layers writes every row's K/V before any row
attends, so the keys a query needs from its siblings are there. The forward is one
compiled call for every layer, as plain decode is, instead of some twenty torch
calls per layer.

A tree mask (EAGLE with topk > 1), queries whose positions are not the last rows of
their slot row, a sliding window or the SWA pool keep the Python layer (build_meta).
"""

from __future__ import annotations

import numpy as np
import torch

from mini_engine.model.attn_meta import AttnMeta
from mini_engine.model.cpu_kernels import ops
from mini_engine.model.decode_fused import FUSED_DTYPES


def can_fuse(layers, dtype: torch.dtype, device: torch.device, torch_attention: bool) -> bool:
    """Whether a forward over `layers` may take paged_rows_meta's metadata (no window or SWA pool)."""
    if not torch_attention or device.type != "cpu" or dtype not in FUSED_DTYPES:
        return False
    if any(layer.sliding or layer.window for layer in layers):
        return False
    return ops() is not None


def paged_rows_meta(slot_rows: list[np.ndarray], q_lens, q_pos: list[np.ndarray] | None,
                    masks: list[np.ndarray | None] | None, page_size: int, device) -> AttnMeta | None:
    """One decode row per query (see the module note), or None where the forward is not expressible."""
    B = len(slot_rows)
    kv = np.fromiter(map(len, slot_rows), dtype=np.int64, count=B)
    ql = np.asarray(q_lens, dtype=np.int64)
    if B == 0 or np.any(ql < 1) or np.any(ql > kv):
        return None
    T = int(ql.sum())
    seq = np.repeat(np.arange(B), ql)
    first = np.cumsum(ql) - ql
    row = (kv - ql)[seq] + (np.arange(T) - first[seq])  # the row index of each query's own key
    if q_pos is not None and not np.array_equal(np.concatenate(q_pos), row):
        return None  # a tree's positions (root + depth) are not its rows
    lens = row + 1  # causal: the keys up to the query's own
    if masks is not None:
        seen: dict[int, bool | None] = {}  # one check per mask object (DFLASH passes one for all)
        for b, m in enumerate(masks):
            if m is None:
                continue
            key = id(m)
            if key in seen:
                full = seen[key]
            else:
                m = np.asarray(m)
                full = True if m.all() else False if np.array_equal(m != 0, np.tri(m.shape[0], dtype=bool)) else None
                seen[key] = full
            if full is None:
                return None
            if full:
                lens[first[b] : first[b] + ql[b]] = kv[b]
    flat = np.concatenate(slot_rows).astype(np.int64, copy=False)
    kv_ptr = np.cumsum(kv) - kv
    out = flat[kv_ptr[seq] + row]
    pages, ps = _page_table(flat, kv, kv_ptr, page_size)
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(device)  # noqa: E731
    lens_d = t(lens)
    ar = torch.arange(T + 1, device=device)
    return AttnMeta(batch=T, max_q=1, max_kv=int(lens.max()), q_lens=np.ones(T, dtype=np.int64), kv_lens=lens,
                    q_indptr=ar, kv_indptr=ar, q_pos=t(row), tok_seq=ar[:T], kv_slots=t(pages[seq]),
                    out_slots=t(out), page_size=ps, kv_lens_device=lens_d)


def _page_table(flat: np.ndarray, kv: np.ndarray, kv_ptr: np.ndarray, page_size: int) -> tuple[np.ndarray, int]:
    """[B, pages] page numbers of each slot row, and the page size they hold for. The memory
    layer keeps a page's positions in consecutive slots (slot % ps == position % ps); a row
    that does not (checked, one pass) falls back to pages of one slot, always exact."""
    B, total = len(kv), len(flat)
    seq = np.repeat(np.arange(B), kv)
    idx = np.arange(total) - kv_ptr[seq]
    for ps in ((page_size, 1) if page_size > 1 else (1,)):
        width = -(-int(kv.max()) // ps)
        table = np.zeros((B, width), dtype=np.int64)
        head = idx % ps == 0
        table[seq[head], idx[head] // ps] = flat[head] // ps
        if ps == 1 or np.array_equal(table[seq, idx // ps] * ps + idx % ps, flat):
            return table, ps
    raise AssertionError("unreachable: one-slot pages always hold")
