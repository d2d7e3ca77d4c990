"""Plain decode on a CPU through the compiled decode layers (csrc/decode_layer.cpp).

A tiny model's decode step is bound by per-call cost, not FLOPs: the Python layer
(layer_step) is some twenty torch calls per layer. Where the kernels are built, a
decode forward (one query per sequence, page-table metadata, the torch attention
backend, a float32/float64 model with fused projections) runs every layer in one
call instead, RoPE tables included. Its projections and residuals are the same ATen
products, RoPE and the cache writes the same float operations; it differs from
layer_step only in rounding: the attention kernel against SDPA, and nothing else
when layer_step itself runs the kernels' RMSNorm and SiLU loops (layers.cpu_ops).
Anything else keeps layer_step."""

from __future__ import annotations

import torch

from mini_engine.model.attn_meta import AttnMeta
from mini_engine.model.cpu_kernels import ops
from mini_engine.model.layers import DecoderLayer, fused


FUSED_DTYPES = (torch.float32, torch.float64)  # the kernels' loops; bf16/fp16 keep the torch path


def decode_layer_kernel(layers, meta: AttnMeta, x: torch.Tensor, torch_attention: bool):
    """The compiled kernels when this forward can take them, else None."""
    if not (meta.page_size and torch_attention and x.device.type == "cpu"):
        return None
    if x.dtype not in FUSED_DTYPES:
        return None
    if not all(_fusable(layer) for layer in layers):
        return None
    return ops()


def _fusable(layer: DecoderLayer) -> bool:
    attn, mlp = _parts(layer)
    return fused(attn.qkv_weight, attn.qkv_parts) and fused(mlp.gate_up, mlp.gate_up_parts)


def _parts(layer: DecoderLayer) -> tuple:
    """layer.self_attn, layer.mlp read from the module's own table: an attribute read
    goes through nn.Module.__getattr__ (a microsecond each, a dozen per layer per step)."""
    mods = layer._modules
    return mods["self_attn"], mods["mlp"]


def _weight(module) -> torch.Tensor:
    """module.weight, as _parts reads a submodule."""
    return module._parameters["weight"]


def fused_decode(kernels, layers, x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor, meta: AttnMeta,
                 cache) -> torch.Tensor:
    """Every layer in one kernel call (RoPE tables included); the hidden states after the last one."""
    copies = x.shape[0] >= COPY_MIN_ROWS
    weights: list[torch.Tensor] = []
    attn = _parts(layers[0])[0]
    qk_norm = attn.q_norm is not None
    for layer in layers:
        mods = layer._modules
        weights += (_weight(mods["input_layernorm"]), _weight(mods["post_attention_layernorm"]))
        weights += in_out_weights(layer, copies)
        if qk_norm:
            a = mods["self_attn"]._modules
            weights += (_weight(a["q_norm"]), _weight(a["k_norm"]))
    return kernels.decode_layers.default(
        x, weights, cache.k, cache.v, meta.out_slots, meta.kv_slots, meta.swa_out_slots, meta.swa_kv_slots,
        [int(layer.sliding) for layer in layers], [layer.window for layer in layers], meta.kv_lens_device, positions,
        inv_freq, attn.num_heads, attn.num_kv_heads, qk_norm, layers[0]._modules["input_layernorm"].eps,
        meta.page_size, attn.head_dim**-0.5, meta.row_seq)


# Contiguous [in, out] copies of the projections are kept while a layer's weights stay
# under this size (a copy doubles them): a tiny model's decode, the case bound by these
# matmuls; a bigger model passes transposed views of its own weights.
COPY_LIMIT_BYTES = 64 << 20
COPY_MIN_ROWS = 16


def prefill_weights(layer: DecoderLayer, x: torch.Tensor) -> tuple | None:
    """in_out_weights for the Python layer (prefill, verify, drafters) where they pay: a
    float32/float64 CPU forward of COPY_MIN_ROWS rows or more with fused projections."""
    attn = layer.self_attn
    if x.device.type != "cpu" or x.shape[0] < COPY_MIN_ROWS or x.dtype not in FUSED_DTYPES:
        return None
    if attn.qkv_weight is None or attn.qkv_weight.dtype != x.dtype or not _fusable(layer):
        return None
    return in_out_weights(layer, True)


def in_out_weights(layer: DecoderLayer, copies: bool) -> tuple:
    """The layer's qkv, o, gate_up and down weights as [in, out] matrices.

    MKL's sgemm runs a fifth faster on a contiguous [in, out] matrix than on the
    transposed view F.linear passes. From COPY_MIN_ROWS rows up the products were
    bitwise F.linear's at every decode shape measured; with a handful of rows MKL
    takes other kernels that round differently, so small batches keep the views (what
    HF's linear computes). The copies are rebuilt when a weight changes (a checkpoint
    load bumps its version counter).
    """
    attn, mlp = _parts(layer)
    ws = (attn.qkv_weight, _weight(attn._modules["o_proj"]), mlp.gate_up, _weight(mlp._modules["down_proj"]))
    if not copies or sum(w.numel() * w.element_size() for w in ws) > COPY_LIMIT_BYTES:
        return tuple(w.t() for w in ws)
    key = tuple((w.data_ptr(), w._version) for w in ws)
    held = layer.__dict__.get("_in_out")
    if held is None or held[0] != key:
        held = (key, tuple(w.t().contiguous() for w in ws))
        layer.__dict__["_in_out"] = held
    return held[1]
