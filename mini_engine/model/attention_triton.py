"""Paged attention as a Triton kernel: extend, decode and verify in one kernel.

One program per (query token, query head). It walks the sequence's slot row in
blocks of BLOCK_N keys, gathers K/V through the slots, masks (causal by position,
custom mask inside the extend part, window) and keeps an online softmax. The
semantics are those of attention_torch (see attn_meta for the mask rule), which is
what the tests compare it with, under TRITON_INTERPRET=1 on a CPU.

All per-sequence lengths are read from device arrays inside the kernel, so the grid
depends only on the number of tokens: a decode batch can be captured in a CUDA graph.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from mini_engine.model.attn_meta import AttnMeta


@triton.jit
def _sequence(q_indptr, kv_indptr, b):
    """Sequence b: first query row, query count, first key row, key count, prefix length."""
    qs = tl.load(q_indptr + b)
    q_len = tl.load(q_indptr + b + 1) - qs
    ks = tl.load(kv_indptr + b)
    kv_len = tl.load(kv_indptr + b + 1) - ks
    return qs, q_len, ks, kv_len, kv_len - q_len


@triton.jit
def _key_block(q_pos, qs, prefix, kv_len, j):
    """Keys j of a block: in range, extend index, in the extend part, position. Prefix keys
    sit at their row index, extend keys at their query's position (a tree's depth)."""
    valid = j < kv_len
    e = j - prefix
    in_ext = valid & (e >= 0)
    kpos = tl.where(in_ext, tl.load(q_pos + qs + e, mask=in_ext, other=0), j)
    return valid, e, in_ext, kpos


# window == 1 must stay a runtime value: Triton would otherwise turn it into a constant.
@triton.jit(do_not_specialize=["window"])
def _paged_attn_kernel(
    Q, K, V, O,
    tok_seq, q_pos, q_indptr, kv_indptr, kv_slots, custom_mask, mask_indptr,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_ot, stride_oh,
    sm_scale, window,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, HAS_MASK: tl.constexpr,
):
    t = tl.program_id(0)
    h = tl.program_id(1)
    kvh = h // GROUP
    b = tl.load(tok_seq + t)
    pos = tl.load(q_pos + t)
    qs, q_len, ks, kv_len, prefix = _sequence(q_indptr, kv_indptr, b)
    i = t - qs

    d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + t * stride_qt + h * stride_qh + d).to(tl.float32)
    m_i = tl.full([1], -1.0e30, tl.float32)
    l_i = tl.zeros([1], tl.float32)
    acc = tl.zeros([HEAD_DIM], tl.float32)

    # Prefix keys sit at their row index: outside the window they can be skipped.
    lo = tl.where(window > 0, tl.maximum(0, tl.minimum(prefix, pos - window + 1)) // BLOCK_N * BLOCK_N, 0)
    for start in range(lo, kv_len, BLOCK_N):
        j = start + tl.arange(0, BLOCK_N)
        valid, e, in_ext, kpos = _key_block(q_pos, qs, prefix, kv_len, j)
        vis = valid & (kpos <= pos)
        if HAS_MASK:
            mbase = tl.load(mask_indptr + b)
            mk = tl.load(custom_mask + mbase + i * q_len + e, mask=in_ext, other=0)
            vis = tl.where(in_ext, mk != 0, vis)
        vis = vis & ((window <= 0) | ((pos - kpos) < window))
        slot = tl.load(kv_slots + ks + j, mask=valid, other=0)
        koff = slot[:, None] * stride_kt + kvh * stride_kh + d[None, :]
        k = tl.load(K + koff, mask=valid[:, None], other=0.0).to(tl.float32)
        s = tl.sum(k * q[None, :], axis=1) * sm_scale
        s = tl.where(vis, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new)
        v = tl.load(V + koff, mask=valid[:, None], other=0.0).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        m_i = m_new
    out = acc / l_i
    tl.store(O + t * stride_ot + h * stride_oh + d, out.to(O.dtype.element_ty))


# One program per (block of BLOCK_M query tokens of one sequence, KV head): the GROUP query
# heads of that KV head and the block's tokens form the rows of one tile, so each K/V
# block is loaded once for all of them and both products are tensor-core dots.
@triton.jit(do_not_specialize=["window"])
def _paged_attn_block_kernel(
    Q, K, V, O,
    blk_seq, blk_m0, q_pos, q_indptr, kv_indptr, kv_slots, custom_mask, mask_indptr,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_ot, stride_oh,
    sm_scale, window,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    HAS_MASK: tl.constexpr, DOT_DTYPE: tl.constexpr, PRECISION: tl.constexpr,
):
    blk = tl.program_id(0)
    kvh = tl.program_id(1)
    b = tl.load(blk_seq + blk)
    m0 = tl.load(blk_m0 + blk)
    qs, q_len, ks, kv_len, prefix = _sequence(q_indptr, kv_indptr, b)

    r = tl.arange(0, BLOCK_M * GROUP)
    i = m0 + r // GROUP  # query index within the sequence
    h = kvh * GROUP + r % GROUP
    row_ok = i < q_len
    t = qs + i
    pos = tl.load(q_pos + t, mask=row_ok, other=0)
    d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + t[:, None] * stride_qt + h[:, None] * stride_qh + d[None, :], mask=row_ok[:, None], other=0.0)
    q = q.to(DOT_DTYPE)
    m_i = tl.full([BLOCK_M * GROUP], -1.0e30, tl.float32)
    l_i = tl.zeros([BLOCK_M * GROUP], tl.float32)
    acc = tl.zeros([BLOCK_M * GROUP, HEAD_DIM], tl.float32)

    lowest = tl.min(tl.where(row_ok, pos, 2147483647), axis=0)
    lo = tl.where(window > 0, tl.maximum(0, tl.minimum(prefix, lowest - window + 1)) // BLOCK_N * BLOCK_N, 0)
    for start in range(lo, kv_len, BLOCK_N):
        j = start + tl.arange(0, BLOCK_N)
        valid, e, in_ext, kpos = _key_block(q_pos, qs, prefix, kv_len, j)
        vis = valid[None, :] & (kpos[None, :] <= pos[:, None])
        if HAS_MASK:
            mbase = tl.load(mask_indptr + b)
            mk = tl.load(custom_mask + mbase + i[:, None] * q_len + e[None, :],
                         mask=row_ok[:, None] & in_ext[None, :], other=0)
            vis = tl.where(in_ext[None, :], mk != 0, vis)
        vis = vis & ((window <= 0) | ((pos[:, None] - kpos[None, :]) < window))
        slot = tl.load(kv_slots + ks + j, mask=valid, other=0)
        koff = slot[:, None] * stride_kt + kvh * stride_kh + d[None, :]
        k = tl.load(K + koff, mask=valid[:, None], other=0.0).to(DOT_DTYPE)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * sm_scale
        s = tl.where(vis, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        v = tl.load(V + koff, mask=valid[:, None], other=0.0).to(DOT_DTYPE)
        acc = acc * alpha[:, None] + tl.dot(p.to(DOT_DTYPE), v, input_precision=PRECISION)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        m_i = m_new
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]  # padding rows may see no key
    tl.store(O + t[:, None] * stride_ot + h[:, None] * stride_oh + d[None, :], out.to(O.dtype.element_ty),
             mask=row_ok[:, None])


def _blocks(meta: AttnMeta, block_m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(sequence, first query) of every block of block_m queries, from host lengths."""
    key = ("blocks", block_m)
    if key not in meta._cache:
        per = -(-meta.q_lens // block_m)
        seq = np.repeat(np.arange(meta.batch), per)
        m0 = np.concatenate([np.arange(n) * block_m for n in per]) if len(per) else np.zeros(0, np.int64)
        dev = meta.q_indptr.device
        meta._cache[key] = (torch.from_numpy(seq.astype(np.int64)).to(dev), torch.from_numpy(m0.astype(np.int64)).to(dev))
    return meta._cache[key]


def triton_paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttnMeta,
    kv_slots: torch.Tensor,
    window: int,
    scale: float,
    block_n: int = 32,
    kernel: str = "auto",
) -> torch.Tensor:
    """Same contract as attention_torch.paged_attention.

    kernel: 'block' (query blocks x KV heads, tensor-core dots), 'token' (one program per
    query token and head: its grid depends only on the token count, which CUDA graphs
    need), or 'auto' (block where its tile shapes allow).
    """
    T, H, D = q.shape
    if D & (D - 1):
        raise ValueError(f"the Triton kernel needs a power-of-two head_dim (got {D})")
    q = q.contiguous()
    out = torch.empty_like(q)
    has_mask = meta.custom_mask is not None
    dummy = meta.q_indptr  # any int tensor: never read when HAS_MASK is False
    group = H // k_cache.shape[1]
    if kernel == "auto":
        kernel = "block" if D >= 16 and group & (group - 1) == 0 and group <= 16 else "token"
    if kernel == "block":
        # Rows per tile = block_m * group: at least 16 (the smallest dot), 64 for long extends.
        rows = 64 if meta.max_q * group >= 64 else 16
        block_m = max(1, rows // group)
        seq, m0 = _blocks(meta, block_m)
        low = q.dtype in (torch.bfloat16, torch.float16)
        _paged_attn_block_kernel[(len(seq), k_cache.shape[1])](
            q, k_cache, v_cache, out,
            seq, m0, meta.q_pos, meta.q_indptr, meta.kv_indptr, kv_slots,
            meta.custom_mask if has_mask else dummy, meta.mask_indptr if has_mask else dummy,
            q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), out.stride(0), out.stride(1),
            scale, window,
            GROUP=group, HEAD_DIM=D, BLOCK_M=block_m, BLOCK_N=max(block_n, 16), HAS_MASK=has_mask,
            # float32 (and float64) models keep full-precision dots: no TF32 rounding.
            DOT_DTYPE=tl.bfloat16 if q.dtype == torch.bfloat16 else tl.float16 if low else tl.float32,
            PRECISION="tf32" if low else "ieee",
        )
        return out
    _paged_attn_kernel[(T, H)](
        q, k_cache, v_cache, out,
        meta.tok_seq, meta.q_pos, meta.q_indptr, meta.kv_indptr, kv_slots,
        meta.custom_mask if has_mask else dummy, meta.mask_indptr if has_mask else dummy,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), out.stride(0), out.stride(1),
        scale, window,
        GROUP=H // k_cache.shape[1], HEAD_DIM=D, BLOCK_N=block_n, HAS_MASK=has_mask,
    )
    return out
