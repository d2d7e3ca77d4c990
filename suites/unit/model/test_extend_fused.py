"""Verify and the drafters through decode_layers (model/extend_fused.py) against build_meta's
Python layer, and the per-phase thread choice (model/threads.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mini_engine.model import cpu_kernels
from mini_engine.model.attn_meta import build_meta
from mini_engine.model.extend_fused import paged_rows_meta
from mini_engine.model.transformer import KVCache

from .conftest import tiny


def _rows(kind: str, page_size: int):
    """Three sequences' slot rows, query counts and masks; pages of page_size consecutive slots
    (shuffled page order), or, with kind 'scattered', slots that break the page rule."""
    rng = np.random.default_rng(3)
    kv, q = [37, 20, 64], [4, 1, 4]
    pages = rng.permutation(np.arange(1, 40))
    rows, at = [], 0
    for n in kv:
        k = -(-n // page_size)
        own = pages[at : at + k]
        at += k
        rows.append((own[:, None] * page_size + np.arange(page_size)).reshape(-1)[:n])
    if kind == "scattered":
        rows[0] = rows[0][::-1].copy()
    masks = None
    if kind == "block":
        masks = [np.ones((n, n), dtype=np.int8) for n in q]
    return rows, q, masks


@pytest.mark.parametrize("kind", ["chain", "block", "scattered"])
def test_decode_rows_forward_equals_the_python_layer(kind):
    if cpu_kernels.ops() is None:
        pytest.skip("the CPU kernels could not be built here (no compiler or ninja)")
    ps = 4
    model = tiny("all-global", 8, dtype="float64")
    rows, q, masks = _rows(kind, ps)
    slots = 40 * ps
    ids = torch.arange(sum(q)) * 7 % model.cfg.vocab_size
    out = {}
    for path in ("fused", "python"):
        cache = KVCache.allocate(model.cfg, slots, 0, "cpu")
        g = torch.Generator().manual_seed(0)
        for t in cache.k + cache.v:  # the prefix's keys and values, the same in both caches
            t.copy_(torch.randn(t.shape, generator=g, dtype=t.dtype))
        meta = (paged_rows_meta(rows, q, None, masks, ps, "cpu") if path == "fused"
                else build_meta(rows, q, None, "cpu", tree_masks=masks))
        assert meta is not None
        out[path] = (model(ids, meta.q_pos, meta, cache), [k.clone() for k in cache.k])
        if path == "fused":
            assert meta.page_size == (1 if kind == "scattered" else ps)  # a broken page rule: one-slot pages
    torch.testing.assert_close(out["fused"][0], out["python"][0], rtol=1e-10, atol=1e-10)
    for a, b in zip(out["fused"][1], out["python"][1]):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_trees_and_tree_positions_keep_the_python_layer():
    rows, q, _ = _rows("chain", 4)
    tree = np.array([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=np.int8)  # siblings: not a chain
    assert paged_rows_meta(rows[:1], [3], None, [tree], 4, "cpu") is None
    depths = rows[0].size - 3 + np.array([0, 1, 1])  # root + depth, not the rows' own positions
    assert paged_rows_meta(rows[:1], [3], [depths], None, 4, "cpu") is None
    causal = np.tri(3, dtype=np.int8)
    meta = paged_rows_meta(rows[:1], [3], None, [causal], 4, "cpu")
    n = rows[0].size
    assert meta.kv_lens.tolist() == [n - 2, n - 1, n]  # each query sees the keys up to its own


def test_matmuls_are_bitwise_equal_at_one_and_two_threads():
    """threads.py may switch the thread count between steps: the products must not move."""
    before = torch.get_num_threads()
    g = torch.Generator().manual_seed(0)
    try:
        for rows in (1, 16, 64, 256):
            a, w = torch.randn(rows, 128, generator=g), torch.randn(256, 128, generator=g)
            got = []
            for n in (1, 2):
                torch.set_num_threads(n)
                got.append((a @ w.t().contiguous(), torch.nn.functional.linear(a, w)))
            for x, y in zip(*got):
                assert torch.equal(x, y)
    finally:
        torch.set_num_threads(before)


def test_a_per_query_table_too_large_keeps_the_python_layer(monkeypatch):
    """T queries x pages per row entries: past MAX_ROW_TABLE the forward takes build_meta."""
    from mini_engine.model import extend_fused

    rows, q, _ = _rows("chain", 4)
    assert paged_rows_meta(rows, q, None, None, 4, "cpu") is not None
    width = -(-max(map(len, rows)) // 4)
    monkeypatch.setattr(extend_fused, "MAX_ROW_TABLE", sum(q) * width - 1)
    assert paged_rows_meta(rows, q, None, None, 4, "cpu") is None
