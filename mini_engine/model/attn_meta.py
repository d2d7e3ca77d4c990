"""Where each sequence's queries and keys live: the metadata every attention backend reads.

A batch is a list of sequences. Sequence b has `kv_len` key positions, read through
its slot row (positions 0..kv_len-1 -> KV slots). Its last `q_len` key positions are
the new tokens of this forward (the "extend" part): their K/V are written by this
forward and they are also the queries. Keys in the prefix sit at the position equal
to their row index; extend keys sit at the query's own position, which for an EAGLE
tree is `committed + depth` rather than the row index. A prefix key is visible when
its position is not later than the query's (causal); an extend key is visible when
it is causal or, if a custom mask is given, when the mask says so (an ancestor in a
tree, anything in a non-causal DFLASH block). On sliding layers the key must also
lie inside the window: `q_pos - k_pos < window`.

Two sources. `build_meta` packs every sequence's slots flat (kv_indptr), from host
rows: the general path (prefill chunks, verify, the drafters). `decode_meta` is plain
decode (one query per sequence, the last position) gathered on the device from the
model backend's mirror of the request-to-token table (model/mirror.py): either flat
(the Triton kernels) or as a page table [B, pages] (`page_size` > 0), the page of
each `page_size` positions, which is how the torch backend gathers whole pages (a
page's slots are consecutive: slot % ps == position % ps).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass
class AttnMeta:
    batch: int
    max_q: int
    max_kv: int
    q_lens: np.ndarray  # host, [B]
    kv_lens: np.ndarray  # host, [B]
    q_indptr: torch.Tensor  # [B+1]
    kv_indptr: torch.Tensor  # [B+1]
    q_pos: torch.Tensor  # [T] RoPE / mask position of each query
    tok_seq: torch.Tensor  # [T] which sequence each query belongs to
    kv_slots: torch.Tensor  # [sum kv_len] full-pool slots
    out_slots: torch.Tensor  # [T] full-pool slots the new K/V go to
    swa_kv_slots: torch.Tensor | None = None  # SWA-pool slots (0 = no live copy, masked by the window)
    swa_out_slots: torch.Tensor | None = None
    custom_mask: torch.Tensor | None = None  # flattened per sequence [q_len, q_len] (int8)
    mask_indptr: torch.Tensor | None = None
    page_size: int = 0  # > 0: kv_slots / swa_kv_slots are page tables [B, pages] (decode_meta)
    kv_lens_device: torch.Tensor | None = None  # [B], decode_meta only
    # [B] the sequence each decode row belongs to, non-decreasing (SlotTable.meta: a verify
    # chain's rows read each other's keys); None: every row is its own sequence (plain decode).
    row_seq: torch.Tensor | None = None
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def prefix_lens(self) -> torch.Tensor:
        return self.kv_indptr[1:] - self.kv_indptr[:-1] - (self.q_indptr[1:] - self.q_indptr[:-1])


def build_meta(
    slot_rows: list[np.ndarray],
    q_lens: list[int],
    q_pos: list[np.ndarray] | None,
    device: torch.device | str,
    swa_rows: list[np.ndarray] | None = None,
    tree_masks: list[np.ndarray | None] | None = None,
) -> AttnMeta:
    """Metadata from host data: `slot_rows[b]` are the slots of positions [0, kv_len).

    `q_pos[b]` defaults to the row indices of the extend part (a causal chain).
    """
    B = len(slot_rows)
    kv_lens = np.array([len(r) for r in slot_rows], dtype=np.int64)
    ql = np.array(q_lens, dtype=np.int64)
    if np.any(ql > kv_lens) or np.any(ql < 1):
        raise ValueError(f"each sequence needs 1 <= q_len <= kv_len (q {ql.tolist()}, kv {kv_lens.tolist()})")
    prefix = kv_lens - ql
    if q_pos is None:
        q_pos = [np.arange(p, p + q, dtype=np.int64) for p, q in zip(prefix, ql)]
    kv_slots = np.concatenate(slot_rows).astype(np.int64)
    out_slots = np.concatenate([r[p:] for r, p in zip(slot_rows, prefix)]).astype(np.int64)
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(device)  # noqa: E731
    meta = AttnMeta(
        batch=B,
        max_q=int(ql.max()),
        max_kv=int(kv_lens.max()),
        q_lens=ql,
        kv_lens=kv_lens,
        q_indptr=t(np.concatenate([[0], np.cumsum(ql)])),
        kv_indptr=t(np.concatenate([[0], np.cumsum(kv_lens)])),
        q_pos=t(np.concatenate(q_pos)),
        tok_seq=t(np.repeat(np.arange(B), ql)),
        kv_slots=t(kv_slots),
        out_slots=t(out_slots),
    )
    if swa_rows is not None:
        meta.swa_kv_slots = t(np.concatenate(swa_rows))
        meta.swa_out_slots = t(np.concatenate([r[p:] for r, p in zip(swa_rows, prefix)]))
    if tree_masks is not None and any(m is not None for m in tree_masks):
        flat = []
        for m, q in zip(tree_masks, ql):
            m = np.tril(np.ones((q, q), dtype=np.int8)) if m is None else np.asarray(m, dtype=np.int8)
            if m.shape != (q, q):
                raise ValueError(f"tree mask of shape {m.shape} for q_len {q}")
            flat.append(m.reshape(-1))
        meta.custom_mask = torch.from_numpy(np.concatenate(flat)).to(device)
        meta.mask_indptr = t(np.concatenate([[0], np.cumsum(ql * ql)]))
    return meta


def decode_meta(
    table: torch.Tensor,
    rows: np.ndarray,
    kv_lens: np.ndarray,
    page_size: int,
    swa_map: torch.Tensor | None = None,
    *,
    flat: bool = False,
) -> AttnMeta:
    """Plain decode metadata from the device mirror of request-to-token, `table` [max_reqs, width].

    `rows[b]` is sequence b's table row and `kv_lens[b]` its length; its one query is
    position kv_lens[b] - 1. Built once per step with a handful of device ops and no
    per-sequence work; every layer reuses it. `swa_map` (the mirror's full slot -> SWA slot) gives
    the SWA page table of sliding layers: a page evicted below the window maps to the
    dummy page 0, which the window masks anyway. flat: the slots of every position,
    packed by kv_indptr (the layout the Triton kernels read), gathered on the device
    too; otherwise a page table [B, pages].
    """
    dev = table.device
    if dev.type == "cpu" and not flat:
        return _decode_meta_host(table.numpy(), rows, kv_lens, page_size, swa_map)
    B = len(kv_lens)
    lens = np.ascontiguousarray(kv_lens, dtype=np.int64)
    max_kv = int(lens.max())
    ps = page_size
    # Every host column in one array and one transfer (one copy on a GPU, and on a CPU
    # one tensor whose slices are views): lengths, table rows, the flat table index of
    # each query's own slot, and the kv indptr.
    host = np.empty(4 * B + 1, dtype=np.int64)
    host[:B] = lens
    host[B : 2 * B] = rows
    np.multiply(host[B : 2 * B], table.shape[1], out=host[2 * B : 3 * B])
    host[2 * B : 3 * B] += lens - 1
    host[3 * B] = 0
    np.cumsum(lens, out=host[3 * B + 1 :])
    cols = torch.from_numpy(host).to(dev)
    lens_d, rows_d = cols[:B], cols[B : 2 * B]
    out = table.view(-1).index_select(0, cols[2 * B : 3 * B])  # the query's own slot
    arange = torch.arange(B + 1, device=dev)
    meta = AttnMeta(
        batch=B, max_q=1, max_kv=max_kv, q_lens=np.ones(B, dtype=np.int64), kv_lens=lens,
        q_indptr=arange, kv_indptr=cols[3 * B :], q_pos=lens_d - 1, tok_seq=arange[:B], kv_slots=out,
        out_slots=out, kv_lens_device=lens_d,
    )
    if flat:
        # Position p of sequence b is entry indptr[b] + p: which sequence and position each
        # entry is, from the host lengths (no device read), then one gather from the table.
        total = int(host[-1])
        seq = torch.repeat_interleave(arange[:B], lens_d, output_size=total)
        pos = torch.arange(total, device=dev) - meta.kv_indptr[:-1][seq]
        meta.kv_slots = table.view(-1)[rows_d[seq] * table.shape[1] + pos]
        if swa_map is not None:
            meta.swa_kv_slots = swa_map[meta.kv_slots]
            meta.swa_out_slots = swa_map[out]
        return meta
    # Only the columns a page starts at, up to the longest sequence: a view, so the
    # gather copies B x pages entries, not B whole rows.
    starts = table[:, :max_kv:ps].index_select(0, rows_d)
    meta.kv_slots, meta.page_size = starts // ps, ps
    if swa_map is not None:
        meta.swa_kv_slots = swa_map[starts] // ps
        meta.swa_out_slots = swa_map[out]
    return meta


def _decode_meta_host(table: np.ndarray, rows: np.ndarray, kv_lens: np.ndarray, page_size: int,
                      swa_map: torch.Tensor | None) -> AttnMeta:
    """decode_meta's page-table layout for a table in host memory (a CPU mirror): the same
    values, gathered by numpy from the table's own memory and wrapped once each, where
    the device path's dozen torch calls cost a few microseconds apiece (~40 us a step)."""
    B = len(kv_lens)
    lens = np.array(kv_lens, dtype=np.int64)  # a copy: kv_lens_device wraps it, and the caller's array lives on
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    max_kv, ps = int(lens.max()), page_size
    out = table.reshape(-1)[rows * table.shape[1] + (lens - 1)]  # the query's own slot
    indptr = np.zeros(B + 1, dtype=np.int64)
    np.cumsum(lens, out=indptr[1:])
    arange = torch.from_numpy(np.arange(B + 1, dtype=np.int64))
    out_d = torch.from_numpy(out)
    # Only the columns a page starts at, up to the longest sequence (a view), then the rows.
    starts = table[:, :max_kv:ps][rows]
    meta = AttnMeta(
        batch=B, max_q=1, max_kv=max_kv, q_lens=np.ones(B, dtype=np.int64), kv_lens=lens,
        q_indptr=arange, kv_indptr=torch.from_numpy(indptr), q_pos=torch.from_numpy(lens - 1), tok_seq=arange[:B],
        kv_slots=torch.from_numpy(starts // ps), out_slots=out_d, kv_lens_device=torch.from_numpy(lens),
        page_size=ps,
    )
    if swa_map is not None:
        sm = swa_map.numpy()
        meta.swa_kv_slots = torch.from_numpy(sm[starts] // ps)
        meta.swa_out_slots = torch.from_numpy(sm[out])
    return meta
