"""The compiled few-queries attention (csrc/extend_attention.cpp) against the torch path.

Verify and drafter metadata (build_meta): causal chains, EAGLE trees (positions
root + depth, an ancestor mask), DFLASH's non-causal block, sliding windows over SWA
slot rows whose evicted positions point at the dummy slot 0.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mini_engine.model import attention_torch, cpu_kernels
from mini_engine.model.attention_torch import EXTEND_MAX_Q, _attend, paged_attention
from mini_engine.model.attn_meta import build_meta


def _kernel():
    if cpu_kernels.extend_attention() is None:
        pytest.skip("the CPU kernels could not be built here (no compiler or ninja)")


def _tree(rng, n: int) -> tuple[list[int], np.ndarray]:
    """Random parents (node 0 the root) and the ancestor mask, self included."""
    parents = [-1] + [int(rng.integers(0, i)) for i in range(1, n)]
    mask = np.zeros((n, n), dtype=np.int8)
    depth = [0] * n
    for i in range(n):
        a = i
        while a >= 0:
            mask[i, a] = 1
            a = parents[a]
        depth[i] = 0 if i == 0 else depth[parents[i]] + 1
    return depth, mask


def _case(seed: int, kind: str, heads: int, kv_heads: int, dim: int, dtype, sliding_window: int = 0):
    rng = np.random.default_rng(seed)
    B = 6
    q_lens = [int(rng.integers(1, 9)) for _ in range(B)]
    prefixes = [int(rng.integers(0, 40)) for _ in range(B)]
    slots = 1 + rng.permutation(sum(p + q for p, q in zip(prefixes, q_lens)) + 16)
    rows, pos, masks, swa_rows, off = [], [], [], [], 0
    for p, q in zip(prefixes, q_lens):
        row = slots[off : off + p + q].astype(np.int64)
        off += p + q
        rows.append(row)
        swa = row.copy()
        if sliding_window:  # positions far below the window are evicted: the dummy slot
            swa[: max(0, p - sliding_window - 2)] = 0
        swa_rows.append(swa)
        if kind == "tree":
            depth, m = _tree(rng, q)
            pos.append(p + np.asarray(depth, dtype=np.int64))
            masks.append(m)
        elif kind == "block":
            pos.append(np.arange(p, p + q))
            masks.append(np.ones((q, q), dtype=np.int8))
        else:
            pos.append(np.arange(p, p + q))
            masks.append(None)
    meta = build_meta(rows, q_lens, pos, "cpu", swa_rows=swa_rows, tree_masks=masks if kind != "chain" else None)
    gen = torch.Generator().manual_seed(seed)
    n_slots = int(slots.max()) + 1
    q = torch.randn(sum(q_lens), heads, dim, generator=gen, dtype=dtype)
    k = torch.randn(n_slots, kv_heads, dim, generator=gen, dtype=dtype)
    v = torch.randn(n_slots, kv_heads, dim, generator=gen, dtype=dtype)
    return q, k, v, meta


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("heads, kv_heads, dim", [(4, 2, 32), (2, 1, 16), (4, 4, 24)])
@pytest.mark.parametrize("kind", ["chain", "tree", "block"])
@pytest.mark.parametrize("window", [0, 5])
def test_extend_attention_matches_the_torch_path(kind, window, heads, kv_heads, dim, dtype):
    _kernel()
    q, k, v, meta = _case(len(kind) * 7 + window, kind, heads, kv_heads, dim, dtype, window)
    rows = meta.swa_kv_slots if window else meta.kv_slots
    scale = dim**-0.5
    want = _attend(q, k, v, meta, rows, window, scale)
    got = cpu_kernels.extend_attention()(q, k, v, rows, meta.q_indptr, meta.kv_indptr, meta.q_pos,
                                         meta.custom_mask, meta.mask_indptr, window, scale)
    tol = 2e-6 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(got, want, atol=tol, rtol=tol)
    # paged_attention, the backend entry point, takes the kernel for such a meta.
    assert torch.equal(paged_attention(q, k, v, meta, rows, window, scale), got)


def test_long_extends_and_a_missing_kernel_keep_the_torch_path(monkeypatch):
    """Past EXTEND_MAX_Q queries (a prefill chunk) and without the kernels: SDPA, bit for bit."""
    q, k, v, meta = _case(3, "chain", 4, 2, 16, torch.float32)
    want = _attend(q, k, v, meta, meta.kv_slots, 0, 0.25)
    monkeypatch.setattr(attention_torch, "extend_attention", lambda: None)
    assert torch.equal(paged_attention(q, k, v, meta, meta.kv_slots, 0, 0.25), want)
    monkeypatch.undo()
    rows = [np.arange(1, EXTEND_MAX_Q + 3, dtype=np.int64)]
    long = build_meta(rows, [EXTEND_MAX_Q + 1], None, "cpu")
    called = []
    monkeypatch.setattr(attention_torch, "extend_attention", lambda: called.append(1))
    ql = torch.randn(EXTEND_MAX_Q + 1, 4, 16)
    paged_attention(ql, k, v, long, long.kv_slots, 0, 0.25)
    assert not called
