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
    table = SlotTable(slot_rows, page_size, device, kv)
    if T * table.pages.shape[1] > MAX_ROW_TABLE:
        return None  # a long prefill chunk at small pages: the per-query table would not pay
    return table.meta(seq, row, lens)


# Entries of the per-query page table (int64) one forward may build: 32 MiB. A 2 x 4000-token
# prefill at page size 16 builds 2 M; at page size 1 (or one-slot pages) 32 M, which build_meta's
# flat layout holds in 8 K entries per sequence instead.
MAX_ROW_TABLE = 1 << 22


class SlotTable:
    """The page table of a batch's slot rows, built once and read by every forward of a step.

    A speculative step runs several forwards over the same requests (the drafter's
    context update and draft steps, the verify); each reads a prefix of the same slot
    row, so one table serves them all, and each forward names its queries by
    (sequence, row) instead of handing over slot rows again.
    """

    def __init__(self, slot_rows: list[np.ndarray], page_size: int, device, kv: np.ndarray | None = None):
        B = len(slot_rows)
        self.kv = np.fromiter(map(len, slot_rows), dtype=np.int64, count=B) if kv is None else kv
        self.flat = np.concatenate(slot_rows).astype(np.int64, copy=False) if B else np.zeros(0, dtype=np.int64)
        self.kv_ptr = np.cumsum(self.kv) - self.kv
        self.pages, self.page_size = _page_table(self.flat, self.kv, self.kv_ptr, page_size) if B else (None, 1)
        self.device = device

    def __len__(self) -> int:
        return len(self.kv)

    def meta(self, seq: np.ndarray, row: np.ndarray, lens: np.ndarray | None = None) -> AttnMeta:
        """Queries at rows `row` of sequences `seq` (one decode row each); `lens`: the keys
        each sees (default causal, row + 1). A row past the slot row raises (K4 seen from
        the model: the reservation must cover what a forward writes)."""
        over = row >= self.kv[seq]
        if over.any():
            i = int(np.flatnonzero(over)[0])
            raise RuntimeError(f"the draft needs positions up to {int(row[i])} but the reservation ends at "
                               f"{int(self.kv[seq[i]])}")
        if lens is None:
            lens = row + 1
        T = len(seq)
        t = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(self.device)  # noqa: E731
        ar = torch.arange(T + 1, device=self.device)
        return AttnMeta(batch=T, max_q=1, max_kv=int(lens.max()), q_lens=np.ones(T, dtype=np.int64), kv_lens=lens,
                        q_indptr=ar, kv_indptr=ar, q_pos=t(row), tok_seq=ar[:T],
                        kv_slots=t(self.pages[seq]), out_slots=t(self.flat[self.kv_ptr[seq] + row]),
                        page_size=self.page_size, kv_lens_device=t(lens), row_seq=t(_grouped(seq)))


def _grouped(seq: np.ndarray) -> np.ndarray:
    """The rows' sequences for decode_layers' row split: as they are when each sequence's rows
    are consecutive (the split cuts only between sequences), else one group (no split)."""
    return seq if len(seq) < 2 or bool(np.all(seq[1:] >= seq[:-1])) else np.zeros_like(seq)


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
