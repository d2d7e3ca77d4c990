"""Paged attention in plain torch: the reference backend that runs anywhere.

General path (build_meta): the batch is padded to [B, max_q] queries x [B, max_kv]
keys; keys are gathered from the paged cache through each sequence's slot row. The
mask (causal by position, window, tree) is built once per metadata and window and
reused by every layer.

Decode path (decode_meta, one query per sequence): whole pages are gathered through
the page table into [B, KV heads, pages x ps, D] and handed to
scaled_dot_product_attention with the G query heads of a KV head as its query rows;
the only mask is [B, 1, 1, keys]: key validity (length) and the window. On a CPU,
where the C++ kernel (cpu_kernels.py) is built, decode reads the pool in place
instead: no gather, no mask.

Few-queries path (a general meta whose sequences have at most EXTEND_MAX_Q queries:
speculative verify, the drafters' forwards, short extends): on a CPU where the
kernels are built, csrc/extend_attention.cpp reads K/V through the slot rows in
place with the same visibility rules (causal, custom mask, window): no padded
gather, no mask tensor. Longer extends (prefill chunks) keep SDPA, whose blocked
products win once a sequence has many queries.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mini_engine.model.attn_meta import AttnMeta
from mini_engine.model.cpu_kernels import decode_attention, extend_attention


def _padded_index(meta: AttnMeta) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """[B, max_q] query rows into the flat batch, [B, max_kv] key offsets, query validity,
    and the valid rows of the padded [B x max_q] queries (the flat batch, in order)."""
    if "index" not in meta._cache:
        dev = meta.q_indptr.device
        qi = torch.arange(meta.max_q, device=dev)
        ki = torch.arange(meta.max_kv, device=dev)
        q_lens = meta.q_indptr[1:] - meta.q_indptr[:-1]
        kv_lens = meta.kv_indptr[1:] - meta.kv_indptr[:-1]
        q_valid = qi[None, :] < q_lens[:, None]
        k_valid = ki[None, :] < kv_lens[:, None]
        q_rows = torch.where(q_valid, meta.q_indptr[:-1, None] + qi[None, :], 0)
        k_rows = torch.where(k_valid, meta.kv_indptr[:-1, None] + ki[None, :], 0)
        meta._cache["index"] = (q_rows, k_rows, q_valid, torch.nonzero(q_valid.view(-1)).squeeze(1))
        meta._cache["k_valid"] = k_valid
    return meta._cache["index"]


def _mask(meta: AttnMeta, window: int) -> torch.Tensor:
    """[B, max_q, max_kv] bool: which key each query sees."""
    key = ("mask", window)
    if key in meta._cache:
        return meta._cache[key]
    q_rows, _, q_valid, _ = _padded_index(meta)
    k_valid = meta._cache["k_valid"]
    dev = q_rows.device
    ki = torch.arange(meta.max_kv, device=dev)
    prefix = meta.prefix_lens
    qpos = meta.q_pos[q_rows]  # [B, Q]
    ext = ki[None, :] - prefix[:, None]  # extend index of each key, < 0 in the prefix
    q_lens = meta.q_indptr[1:] - meta.q_indptr[:-1]
    in_ext = (ext >= 0) & (ext < q_lens[:, None])
    ext_c = ext.clamp(0, meta.max_q - 1)
    kpos = torch.where(in_ext, torch.gather(qpos, 1, ext_c), ki[None, :])
    mask = k_valid[:, None, :] & (kpos[:, None, :] <= qpos[:, :, None])
    if meta.custom_mask is not None:
        # Within the extend part the custom mask decides alone: ancestors for a tree,
        # everything for a non-causal DFLASH block.
        qi = torch.arange(meta.max_q, device=dev)
        idx = meta.mask_indptr[:-1, None, None] + qi[None, :, None] * q_lens[:, None, None] + ext_c[:, None, :]
        idx = torch.where(in_ext[:, None, :] & q_valid[:, :, None], idx, 0)
        custom = meta.custom_mask[idx].bool() & k_valid[:, None, :]
        mask = torch.where(in_ext[:, None, :], custom, mask)
    if window > 0:
        mask &= (qpos[:, :, None] - kpos[:, None, :]) < window
    # Padded query rows see key 0 so that softmax stays finite; their output is dropped.
    mask[:, :, 0] |= ~q_valid
    meta._cache[key] = mask
    return mask


# Padded (query, key) pairs per group of sequences: bounds the score tensor when a batch
# mixes a long prefill with many short sequences.
GROUP_LIMIT = 1 << 22
# Most queries a sequence may have for the compiled few-queries kernel: a verify tree or
# block, a draft step, the context update after a verify.
EXTEND_MAX_Q = 16


def _groups(meta: AttnMeta) -> list[AttnMeta]:
    """Consecutive sequence ranges whose padded size stays under GROUP_LIMIT, as sub-metadata."""
    if "groups" in meta._cache:
        return meta._cache["groups"]
    ql, kl = meta.q_lens, meta.kv_lens
    if meta.batch * meta.max_q * meta.max_kv <= GROUP_LIMIT:
        meta._cache["groups"] = [meta]
        return meta._cache["groups"]
    bounds, lo, mq, mk = [], 0, 0, 0
    for b in range(meta.batch):
        nq, nk = max(mq, int(ql[b])), max(mk, int(kl[b]))
        if b > lo and (b + 1 - lo) * nq * nk > GROUP_LIMIT:
            bounds.append((lo, b))
            lo, nq, nk = b, int(ql[b]), int(kl[b])
        mq, mk = nq, nk
    bounds.append((lo, meta.batch))
    meta._cache["groups"] = [_sub_meta(meta, lo, hi) for lo, hi in bounds]
    return meta._cache["groups"]


def _sub_meta(meta: AttnMeta, lo: int, hi: int) -> AttnMeta:
    q0, q1 = int(meta.q_lens[:lo].sum()), int(meta.q_lens[:hi].sum())
    k0, k1 = int(meta.kv_lens[:lo].sum()), int(meta.kv_lens[:hi].sum())
    sub = AttnMeta(
        batch=hi - lo, max_q=int(meta.q_lens[lo:hi].max()), max_kv=int(meta.kv_lens[lo:hi].max()),
        q_lens=meta.q_lens[lo:hi], kv_lens=meta.kv_lens[lo:hi],
        q_indptr=meta.q_indptr[lo : hi + 1] - q0, kv_indptr=meta.kv_indptr[lo : hi + 1] - k0,
        q_pos=meta.q_pos[q0:q1], tok_seq=meta.tok_seq[q0:q1] - lo,
        kv_slots=meta.kv_slots[k0:k1], out_slots=meta.out_slots[q0:q1],
    )
    sub._cache["kv_range"] = (k0, k1)
    if meta.custom_mask is not None:
        m0 = int((meta.q_lens[:lo] ** 2).sum())
        m1 = int((meta.q_lens[:hi] ** 2).sum())
        sub.custom_mask = meta.custom_mask[m0:m1]
        sub.mask_indptr = meta.mask_indptr[lo : hi + 1] - m0
    return sub


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttnMeta,
    kv_slots: torch.Tensor,
    window: int,
    scale: float,
) -> torch.Tensor:
    """q: [T, H, D]; caches: [S, KVH, D]; kv_slots: the flat slot rows (or, with a
    decode_meta, its page table). Returns [T, H, D]."""
    if meta.page_size:
        return _decode(q, k_cache, v_cache, meta, kv_slots, window, scale)
    if meta.max_q <= EXTEND_MAX_Q and q.device.type == "cpu" and q.dtype in (torch.float32, torch.float64):
        kernel = extend_attention()
        if kernel is not None:
            return kernel(q, k_cache, v_cache, kv_slots, meta.q_indptr, meta.kv_indptr, meta.q_pos,
                          meta.custom_mask, meta.mask_indptr, window, scale)
    groups = _groups(meta)
    if len(groups) == 1:
        return _attend(q, k_cache, v_cache, meta, kv_slots, window, scale)
    out, off = [], 0
    for sub in groups:
        n = int(sub.q_lens.sum())
        k0, k1 = sub._cache["kv_range"]
        out.append(_attend(q[off : off + n], k_cache, v_cache, sub, kv_slots[k0:k1], window, scale))
        off += n
    return torch.cat(out)


def _attend(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttnMeta,
    kv_slots: torch.Tensor,
    window: int,
    scale: float,
) -> torch.Tensor:
    T, H, D = q.shape
    KVH = k_cache.shape[1]
    G = H // KVH
    B, Q, L = meta.batch, meta.max_q, meta.max_kv
    q_rows, k_rows, _, valid_rows = _padded_index(meta)
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    mask = _sdpa_mask(meta, window, G, acc)
    # The padded slot rows are the same for every layer reading this slot table (full or
    # SWA): gathered once per forward. The key is the table's storage, alive with the meta.
    key = ("slots", kv_slots.data_ptr(), kv_slots.shape[0])
    slots = meta._cache.get(key)
    if slots is None:
        slots = meta._cache[key] = kv_slots.index_select(0, k_rows.view(-1))
    k = k_cache.index_select(0, slots).view(B, L, KVH, D).transpose(1, 2)
    v = v_cache.index_select(0, slots).view(B, L, KVH, D).transpose(1, 2)
    # Every sequence with max_q queries (a verify batch of equal drafts): the flat batch
    # is already [B, Q], no padding to gather in or drop out.
    uniform = meta._cache.get("uniform")
    if uniform is None:
        uniform = meta._cache["uniform"] = bool((meta.q_lens == Q).all())
    qb = q.view(B, Q, KVH, G, D) if uniform else q.index_select(0, q_rows.view(-1)).view(B, Q, KVH, G, D)
    # Query rows of KV head j: its G heads x the Q padded queries, so K/V are not repeated.
    qp = qb.permute(0, 2, 3, 1, 4).reshape(B, KVH, G * Q, D)
    if q.dtype != acc:
        qp, k, v = qp.to(acc), k.to(acc), v.to(acc)
    out = F.scaled_dot_product_attention(qp, k, v, attn_mask=mask, scale=scale)
    out = out.view(B, KVH, G, Q, D).permute(0, 3, 1, 2, 4).reshape(B * Q, H, D)
    if not uniform:
        out = out.index_select(0, valid_rows)
    return out.to(q.dtype)


def _sdpa_mask(meta: AttnMeta, window: int, groups: int, dtype: torch.dtype) -> torch.Tensor:
    """_mask as SDPA's additive [B, 1, G x max_q, max_kv], the same rows for each of the G heads."""
    key = ("sdpa_mask", window, groups, dtype)
    if key not in meta._cache:
        m = _mask(meta, window)
        add = torch.zeros(m.shape, dtype=dtype, device=m.device).masked_fill_(~m, float("-inf"))
        B, Q, L = m.shape
        meta._cache[key] = add[:, None, None].expand(B, 1, groups, Q, L).reshape(B, 1, groups * Q, L)
    return meta._cache[key]


def _decode_mask(meta: AttnMeta, keys: int, window: int, dtype: torch.dtype) -> torch.Tensor:
    """[B, 1, 1, keys] additive mask of a decode step: 0 where the key is visible."""
    key = ("decode_mask", window, keys, dtype)
    if key not in meta._cache:
        lens = meta.kv_lens_device
        j = torch.arange(keys, device=lens.device)
        vis = j[None, :] < lens[:, None]
        if window > 0:
            vis &= j[None, :] > (lens[:, None] - 1 - window)
        mask = torch.zeros(vis.shape, dtype=dtype, device=lens.device).masked_fill_(~vis, float("-inf"))
        meta._cache[key] = mask[:, None, None, :]
    return meta._cache[key]


def _decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttnMeta,
    pages: torch.Tensor,
    window: int,
    scale: float,
) -> torch.Tensor:
    """One query per sequence: the compiled kernel where it is built, else keys gathered a page at a time."""
    if q.device.type == "cpu" and q.dtype in (torch.float32, torch.float64):
        kernel = decode_attention()
        if kernel is not None:
            return kernel(q.contiguous(), k_cache, v_cache, pages, meta.kv_lens_device, meta.page_size, window, scale)
    return torch_decode(q, k_cache, v_cache, meta, pages, window, scale)


def torch_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttnMeta,
    pages: torch.Tensor,
    window: int,
    scale: float,
) -> torch.Tensor:
    """The decode path in plain torch: whole pages gathered, one SDPA with a length mask."""
    B, H, D = q.shape
    KVH = k_cache.shape[1]
    ps = meta.page_size
    keys = pages.shape[1] * ps
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    flat = pages.reshape(-1)
    # A cache of (pages + 1) x ps slots viewed as pages: one row per page, one copy per page.
    k = k_cache.view(-1, ps * KVH * D).index_select(0, flat).view(B, keys, KVH, D).transpose(1, 2)
    v = v_cache.view(-1, ps * KVH * D).index_select(0, flat).view(B, keys, KVH, D).transpose(1, 2)
    qg = q.view(B, KVH, H // KVH, D)  # the G heads sharing a KV head are its query rows
    mask = _decode_mask(meta, keys, window, acc)
    if q.dtype == acc:  # float32/float64: no conversion calls (a step is bound by per-call cost)
        return F.scaled_dot_product_attention(qg, k, v, attn_mask=mask, scale=scale).view(B, H, D)
    out = F.scaled_dot_product_attention(qg.to(acc), k.to(acc), v.to(acc), attn_mask=mask, scale=scale)
    return out.reshape(B, H, D).to(q.dtype)
