"""Plain decode on a CPU through the compiled decode layer (csrc/decode_layer.cpp).

A tiny model's decode step is bound by per-call cost, not FLOPs: the Python layer
(layer_step) is some twenty torch calls per layer. Where the kernels are built, a
decode forward (one query per sequence, page-table metadata, the torch attention
backend, a float32/float64 model with fused projections) runs each layer as one call
instead. Its norms, projections and residuals are the same ATen ops, RoPE and the
cache writes the same float operations, so it differs from layer_step only where the
attention kernel rounds differently from SDPA. Anything else keeps layer_step.
"""

from __future__ import annotations

import torch

from mini_engine.model.attn_meta import AttnMeta
from mini_engine.model.cpu_kernels import decode_layer
from mini_engine.model.layers import DecoderLayer, fused


def decode_layer_kernel(layers, meta: AttnMeta, x: torch.Tensor, rope: tuple, torch_attention: bool):
    """The compiled layer when this forward can take it, else None."""
    if not (meta.page_size and torch_attention and x.device.type == "cpu"):
        return None
    if x.dtype not in (torch.float32, torch.float64) or rope[0].dtype != x.dtype:
        return None
    if not all(_fusable(layer) for layer in layers):
        return None
    return decode_layer()


def _fusable(layer: DecoderLayer) -> bool:
    attn, mlp = layer.self_attn, layer.mlp
    return fused(attn.qkv_weight, attn.qkv_parts) and fused(mlp.gate_up, mlp.gate_up_parts)


def fused_decode(kernel, layers, x: torch.Tensor, rope: tuple, meta: AttnMeta, cache) -> torch.Tensor:
    """Every layer through the kernel; the hidden states after the last one."""
    cos, ssin = rope
    for i, layer in enumerate(layers):
        attn = layer.self_attn
        sliding = layer.sliding
        out_slots = meta.swa_out_slots if sliding else meta.out_slots
        pages = meta.swa_kv_slots if sliding else meta.kv_slots
        qn = attn.q_norm.weight if attn.q_norm is not None else None
        kn = attn.k_norm.weight if attn.k_norm is not None else None
        x = kernel(x, layer.input_layernorm.weight, layer.post_attention_layernorm.weight, attn.qkv_weight,
                   attn.o_proj.weight, layer.mlp.gate_up, layer.mlp.down_proj.weight, qn, kn, cache.k[i], cache.v[i],
                   out_slots, pages, meta.kv_lens_device, cos, ssin, attn.num_heads, attn.num_kv_heads,
                   layer.input_layernorm.eps, meta.page_size, layer.window, attn.head_dim**-0.5)
    return x
