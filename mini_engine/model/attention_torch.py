"""Paged attention in plain torch: the reference backend that runs anywhere.

The batch is padded to [B, max_q] queries x [B, max_kv] keys; keys are gathered from
the paged cache through each sequence's slot row. The mask (causal by position,
window, tree) is built once per metadata and window and reused by every layer.
"""

from __future__ import annotations

import torch

from mini_engine.model.attn_meta import AttnMeta


def _padded_index(meta: AttnMeta) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """[B, max_q] query rows into the flat batch, [B, max_kv] key offsets, query validity."""
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
        meta._cache["index"] = (q_rows, k_rows, q_valid, k_valid)
    return meta._cache["index"]


def _mask(meta: AttnMeta, window: int) -> torch.Tensor:
    """[B, max_q, max_kv] bool: which key each query sees."""
    key = ("mask", window)
    if key in meta._cache:
        return meta._cache[key]
    q_rows, _, q_valid, k_valid = _padded_index(meta)
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


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttnMeta,
    kv_slots: torch.Tensor,
    window: int,
    scale: float,
) -> torch.Tensor:
    """q: [T, H, D]; caches: [S, KVH, D]; kv_slots: the flat slot rows. Returns [T, H, D]."""
    T, H, D = q.shape
    KVH = k_cache.shape[1]
    G = H // KVH
    q_rows, k_rows, q_valid, _ = _padded_index(meta)
    mask = _mask(meta, window)
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    slots = kv_slots[k_rows]  # [B, L]
    k = k_cache[slots].to(acc)  # [B, L, KVH, D]
    v = v_cache[slots].to(acc)
    qp = q[q_rows].to(acc).view(meta.batch, meta.max_q, KVH, G, D)
    scores = torch.einsum("bqkgd,blkd->bkgql", qp, k) * scale
    scores = scores.masked_fill(~mask[:, None, None, :, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = torch.einsum("bkgql,blkd->bqkgd", probs, v).reshape(meta.batch, meta.max_q, H, D)
    return out[q_valid].to(q.dtype)
