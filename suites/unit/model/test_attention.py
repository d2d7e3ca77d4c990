"""Paged attention: the torch reference against a per-query loop, Triton against torch.

Triton runs under TRITON_INTERPRET=1 on a CPU (set by suites/conftest.py), where
each program instance costs milliseconds, so the grids stay small: a handful of
query tokens and heads per case. Where a GPU is visible the interpreter is off and
the same cases run natively on the GPU (the kernels cannot take CPU tensors then).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mini_engine.model.attention_torch import paged_attention
from mini_engine.model.attention_triton import triton_paged_attention
from mini_engine.model.attn_meta import build_meta
from mini_engine.model.transformer import KVCache

from .conftest import tiny

SLOTS = 160
DEV = "cuda" if torch.cuda.is_available() else "cpu"  # where the Triton cases run


def loop_reference(q, k_cache, v_cache, rows, q_lens, q_pos, masks, window, scale):
    """One query at a time, straight from the mask rule in attn_meta's docstring."""
    out = []
    off = 0
    g = q.shape[1] // k_cache.shape[1]
    for row, ql, pos, mask in zip(rows, q_lens, q_pos, masks):
        prefix = len(row) - ql
        kpos = np.concatenate([np.arange(prefix), pos])
        for i in range(ql):
            vis = []
            for j in range(len(row)):
                if j < prefix:
                    ok = kpos[j] <= pos[i]
                else:
                    ok = bool(mask[i, j - prefix]) if mask is not None else kpos[j] <= pos[i]
                if window:
                    ok = ok and pos[i] - kpos[j] < window
                vis.append(ok)
            idx = torch.from_numpy(row[np.array(vis)])
            k = k_cache[idx].repeat_interleave(g, 1).double()
            v = v_cache[idx].repeat_interleave(g, 1).double()
            s = torch.einsum("hd,khd->hk", q[off + i].double(), k) * scale
            out.append(torch.einsum("hk,khd->hd", s.softmax(-1), v))
        off += ql
    return torch.stack(out).float()


def case(seed, specs, kv_heads=2, heads=4, dim=16, device="cpu"):
    """specs: (kv_len, q_len, kind) with kind 'causal' | 'tree' | 'block'."""
    rng = np.random.default_rng(seed)
    free = rng.permutation(np.arange(1, SLOTS))
    rows, q_lens, q_pos, masks, used = [], [], [], [], 0
    for kv_len, ql, kind in specs:
        rows.append(free[used : used + kv_len])
        used += kv_len
        prefix = kv_len - ql
        if kind == "tree":
            parents = [-1] + [int(rng.integers(0, i)) for i in range(1, ql)]
            depth = [0] * ql
            m = np.zeros((ql, ql), dtype=np.int8)
            for i in range(ql):
                depth[i] = 0 if i == 0 else depth[parents[i]] + 1
                a = i
                while a >= 0:
                    m[i, a] = 1
                    a = parents[a]
            q_pos.append(prefix + np.array(depth))
            masks.append(m)
        elif kind == "block":
            q_pos.append(np.arange(prefix, kv_len))
            masks.append(np.ones((ql, ql), dtype=np.int8))
        else:
            q_pos.append(np.arange(prefix, kv_len))
            masks.append(None)
        q_lens.append(ql)
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(sum(q_lens), heads, dim, generator=gen).to(device)
    k = torch.randn(SLOTS, kv_heads, dim, generator=gen).to(device)
    v = torch.randn(SLOTS, kv_heads, dim, generator=gen).to(device)
    tree = masks if any(m is not None for m in masks) else None
    meta = build_meta(rows, q_lens, q_pos, device, tree_masks=tree)
    return q, k, v, meta, (rows, q_lens, q_pos, masks)


BATCHES = {
    "prefill+decode": [(23, 5, "causal"), (9, 1, "causal"), (3, 3, "causal")],
    "verify-chain": [(30, 4, "causal"), (17, 4, "causal")],
    "verify-tree": [(26, 5, "tree"), (12, 4, "tree")],
    "dflash-block": [(20, 4, "block"), (6, 4, "block")],
}


@pytest.mark.parametrize("window", [0, 4, 11])
@pytest.mark.parametrize("name", sorted(BATCHES))
def test_torch_matches_loop_reference(name, window):
    q, k, v, meta, raw = case(1, BATCHES[name])
    got = paged_attention(q, k, v, meta, meta.kv_slots, window, 0.25)
    torch.testing.assert_close(got, loop_reference(q, k, v, *raw, window, 0.25), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("window", [0, 5])
@pytest.mark.parametrize("name", sorted(BATCHES))
def test_triton_token_kernel_matches_torch(name, window):
    q, k, v, meta, _ = case(2, BATCHES[name], heads=2, kv_heads=1, device=DEV)
    want = paged_attention(q, k, v, meta, meta.kv_slots, window, 0.25)
    got = triton_paged_attention(q, k, v, meta, meta.kv_slots, window, 0.25, block_n=8, kernel="token")
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("heads, kv_heads", [(2, 1), (4, 2), (8, 1)])
@pytest.mark.parametrize("window", [0, 5])
@pytest.mark.parametrize("name", sorted(BATCHES))
def test_triton_block_kernel_matches_torch(name, window, heads, kv_heads):
    q, k, v, meta, _ = case(4, BATCHES[name], heads=heads, kv_heads=kv_heads, device=DEV)
    want = paged_attention(q, k, v, meta, meta.kv_slots, window, 0.25)
    got = triton_paged_attention(q, k, v, meta, meta.kv_slots, window, 0.25, block_n=16, kernel="block")
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 1000), window=st.sampled_from([0, 2, 7]), kernel=st.sampled_from(["token", "block"]),
       specs=st.lists(st.tuples(st.integers(1, 40), st.sampled_from(["causal", "tree", "block"])), min_size=1, max_size=3))
def test_triton_matches_torch_random(seed, window, kernel, specs):
    full = [(kv, 1 + seed % min(kv, 20 if kernel == "block" else 3), kind) for kv, kind in specs]
    q, k, v, meta, _ = case(seed, full, heads=2, kv_heads=1, device=DEV)
    want = paged_attention(q, k, v, meta, meta.kv_slots, window, 0.3)
    got = triton_paged_attention(q, k, v, meta, meta.kv_slots, window, 0.3, block_n=8 if kernel == "token" else 16,
                                 kernel=kernel)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_model_forward_with_triton_equals_torch():
    """A whole paged forward (SWA layers included) with each backend: prefill then decode."""
    model = tiny("1:1", 5).to(DEV)
    cache_t = KVCache.allocate(model.cfg, SLOTS, SLOTS, DEV)
    cache_r = KVCache.allocate(model.cfg, SLOTS, SLOTS, DEV)
    row = np.random.default_rng(0).permutation(np.arange(1, SLOTS))[:9]
    ids = torch.tensor([5, 9, 2, 7, 1, 3, 8, 4, 6], device=DEV)
    for start, end in [(0, 8), (8, 9)]:
        meta = build_meta([row[:end]], [end - start], None, DEV, swa_rows=[row[:end]])
        a = model(ids[start:end], meta.q_pos, meta, cache_r)
        b = model(ids[start:end], meta.q_pos, meta, cache_t, triton_paged_attention)
        torch.testing.assert_close(b, a, atol=1e-4, rtol=1e-4)


def test_grouped_batches_match_one_batch(monkeypatch):
    """A batch split into sequence groups (to bound the padded scores) gives the same output."""
    import mini_engine.model.attention_torch as at

    for name in ("prefill+decode", "verify-tree"):
        q, k, v, meta, _ = case(3, BATCHES[name])
        whole = at.paged_attention(q, k, v, meta, meta.kv_slots, 4, 0.25)
        monkeypatch.setattr(at, "GROUP_LIMIT", 40)
        q2, k2, v2, meta2, _ = case(3, BATCHES[name])
        assert len(at._groups(meta2)) > 1
        torch.testing.assert_close(at.paged_attention(q2, k2, v2, meta2, meta2.kv_slots, 4, 0.25), whole)
        monkeypatch.undo()


def test_one_meta_serves_two_slot_tables():
    """A meta's gathered slot rows are kept per table: a sliding layer's SWA table read
    after the full table (the same meta, the same length) gets its own rows."""
    q, k, v, meta, _ = case(5, BATCHES["verify-tree"])
    swa = torch.from_numpy(np.random.default_rng(50).permutation(np.arange(1, SLOTS))[: len(meta.kv_slots)])
    full_first = paged_attention(q, k, v, meta, meta.kv_slots, 0, 0.25)
    swa_after = paged_attention(q, k, v, meta, swa, 0, 0.25)
    _, _, _, fresh, _ = case(5, BATCHES["verify-tree"])
    torch.testing.assert_close(swa_after, paged_attention(q, k, v, fresh, swa, 0, 0.25))
    assert not torch.equal(swa_after, full_first)
