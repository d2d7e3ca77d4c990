"""The model's dtypes: the torch table agrees with the torch-free byte sizes (pool sizing
counts bytes from mini_engine.config.shapes, the model allocates in the torch dtype), and
a low-precision LM head is upcast once."""

from __future__ import annotations

import torch

from mini_engine.config.shapes import DTYPE_BYTES
from mini_engine.model.config import DTYPES


def test_byte_sizes_match_torch():
    assert set(DTYPES) == set(DTYPE_BYTES)
    for name, dtype in DTYPES.items():
        assert torch.empty((), dtype=dtype).element_size() == DTYPE_BYTES[name], name


def test_low_precision_lm_head_is_upcast_once():
    """A bf16 head is upcast to float32 on first use and kept (not on every logits call);
    float32 and float64 heads are used as they are."""
    from .conftest import tiny

    model = tiny("all-global", dtype="bfloat16")
    h = torch.randn(3, model.cfg.hidden_size).to(torch.bfloat16)
    first = model.logits(h)
    assert model.head_weight_acc() is model.head_weight_acc()
    assert model.head_weight_acc().dtype == torch.float32 and first.dtype == torch.float32
    want = model.model.norm(h).float() @ model.head_weight().float().T
    torch.testing.assert_close(model.logits(h), want, rtol=0, atol=0)
    exact = tiny("all-global", dtype="float64")
    assert exact.head_weight_acc() is exact.head_weight()
