"""Building blocks of a Llama / Qwen3 decoder layer.

Parameter names follow the Hugging Face checkpoints (q_proj, gate_proj,
input_layernorm, ...) so that a checkpoint's state dict loads without renaming.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch import nn

from mini_engine.config.shapes import ModelConfig
from mini_engine.model.cpu_kernels import ops


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kernels = cpu_ops(x, self.weight)
        if kernels is not None:  # one loop, where torch's rms_norm is half a dozen ATen calls on a CPU
            return kernels.rms_norm.default(x, self.weight, self.eps)
        # torch's rms_norm is these same ops in one call (x * rsqrt(mean(x^2) + eps) * weight,
        # in float32 at least: bf16 variance loses too much), without the Python per op.
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)


def cpu_ops(x: torch.Tensor, w: torch.Tensor):
    """The compiled CPU kernels (cpu_kernels.ops) for a float32/float64 CPU tensor, else None."""
    if x.device.type != "cpu" or x.dtype != w.dtype or x.dtype not in (torch.float32, torch.float64):
        return None
    return ops()


def rope_cos_sin(positions: torch.Tensor, cfg: ModelConfig, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = rope_inv_freq(cfg, positions, dtype)
    acc = inv_freq.dtype
    freqs = positions.to(acc)[:, None] * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def rope_inv_freq(cfg: ModelConfig, like: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The RoPE frequencies in the accumulation dtype of `dtype` (like's by default), on like's device."""
    acc = torch.float64 if (dtype or like.dtype) == torch.float64 else torch.float32
    return _inv_freq(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling, like.device, acc)


@functools.lru_cache(maxsize=16)
def _inv_freq(d: int, theta: float, scaling: tuple | None, device: torch.device, acc: torch.dtype) -> torch.Tensor:
    """RoPE frequencies of a shape: computed once, not on every forward."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, device=device, dtype=acc) / d))
    return inv_freq if scaling is None else llama3_scaled(inv_freq, *scaling)


def llama3_scaled(inv_freq: torch.Tensor, factor: float, low_freq_factor: float, high_freq_factor: float,
                  original_max_positions: int) -> torch.Tensor:
    """Llama 3.1's RoPE frequency scaling: long wavelengths slowed by `factor`, short ones
    kept, a smooth blend between."""
    low_wavelen = original_max_positions / low_freq_factor
    high_wavelen = original_max_positions / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (original_max_positions / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(medium, blended, scaled)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [T, heads, D]; the rotate-half convention of the HF Llama code."""
    acc = cos.dtype
    xf = x.to(acc)
    half = x.shape[-1] // 2
    rot = torch.cat([-xf[..., half:], xf[..., :half]], dim=-1)
    return (xf * cos[:, None, :] + rot * sin[:, None, :]).to(x.dtype)


def rope_tables(cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, signed sin) as [T, 1, D], once per forward, for apply_rope_signed.

    The signed sin has its first half negated: rotate-half times sin is then the swapped
    halves times it, the same products (a sign flip is exact) with one roll instead of
    a neg and a cat per call.
    """
    half = sin.shape[-1] // 2
    return cos[:, None, :], torch.cat([-sin[:, :half], sin[:, half:]], dim=-1)[:, None, :]


def apply_rope_signed(x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """apply_rope with rope_tables: bitwise the same result, fewer ops per call."""
    cos, signed_sin = rope
    if x.dtype == cos.dtype:  # float32/float64 models: no conversions (each is a call)
        return x * cos + x.roll(x.shape[-1] // 2, -1) * signed_sin
    xf = x.to(cos.dtype)
    swapped = xf.roll(x.shape[-1] // 2, -1)  # [x2, x1]: one copy (flip is several times slower)
    return (xf * cos + swapped * signed_sin).to(x.dtype)


class MLP(nn.Module):
    def __init__(self, hidden: int, inter: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)
        self.gate_up: torch.Tensor | None = None
        self.gate_up_parts: tuple = ()

    def fuse(self) -> None:
        """gate_proj and up_proj become views of one [gate; up] weight (see fuse_rows)."""
        self.gate_up = fuse_rows(self.gate_proj, self.up_proj)
        self.gate_up_parts = (self.gate_proj, self.up_proj)

    def forward(self, x: torch.Tensor, in_out: tuple | None = None) -> torch.Tensor:
        """in_out: [in, out] copies of gate_up and down (decode_fused.in_out_weights)."""
        if fused(self.gate_up, self.gate_up_parts):
            gate_up = F.linear(x, self.gate_up) if in_out is None else x @ in_out[0]
            kernels = cpu_ops(x, self.gate_up) if gate_up.dim() == 2 else None
            if kernels is not None:
                act = kernels.silu_mul.default(gate_up)
            else:
                gate, up = gate_up.chunk(2, dim=-1)
                act = F.silu(gate) * up
            return self.down_proj.forward(act) if in_out is None else act @ in_out[1]
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class SelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, cfg.num_heads * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.num_heads * cfg.head_dim, cfg.hidden_size, bias=False)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_eps)
            self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_eps)
        else:
            self.q_norm = self.k_norm = None
        self.qkv_weight: torch.Tensor | None = None
        self.qkv_parts: tuple = ()

    def fuse(self) -> None:
        """q, k and v projections become views of one [q; k; v] weight (see fuse_rows)."""
        self.qkv_weight = fuse_rows(self.q_proj, self.k_proj, self.v_proj)
        self.qkv_parts = (self.q_proj, self.k_proj, self.v_proj)

    def qkv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rope: tuple | None = None,
            w_in_out: torch.Tensor | None = None):
        """q [T, H, D], k and v [T, KVH, D], RoPE applied. With `rope` (rope_tables) and a
        fused weight: one matmul and, without q/k norms, one RoPE for q and k together.
        w_in_out: an [in, out] copy of the fused weight (decode_fused.in_out_weights)."""
        T = x.shape[0]
        H, KVH, D = self.num_heads, self.num_kv_heads, self.head_dim
        if rope is None or not fused(self.qkv_weight, self.qkv_parts):
            q = self.q_proj(x).view(T, H, D)
            k = self.k_proj(x).view(T, KVH, D)
            v = self.v_proj(x).view(T, KVH, D)
            if self.q_norm is not None:
                q, k = self.q_norm(q), self.k_norm(k)
            return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v
        qkv = (F.linear(x, self.qkv_weight) if w_in_out is None else x @ w_in_out).view(T, H + 2 * KVH, D)
        v = qkv[:, H + KVH :]
        if self.q_norm is not None:
            q, k = self.q_norm(qkv[:, :H]), self.k_norm(qkv[:, H : H + KVH])
            return apply_rope_signed(q, rope), apply_rope_signed(k, rope), v
        qk = apply_rope_signed(qkv[:, : H + KVH], rope)
        return qk[:, :H], qk[:, H:], v


def fuse_rows(*linears: nn.Linear) -> torch.Tensor:
    """Stack the linears' weights into one tensor and make each weight a view of its rows.

    One matmul then serves them all (the same products: the rows of a weight are
    independent dot products). The parameters keep their names and stay what a
    checkpoint loads into; nothing is stored twice.
    """
    w = torch.cat([lin.weight.detach() for lin in linears])
    off = 0
    for lin in linears:
        n = lin.weight.shape[0]
        lin.weight = nn.Parameter(w[off : off + n], requires_grad=False)
        off += n
    return w


def fused(weight: torch.Tensor | None, linears: tuple) -> bool:
    """The fused weight still backs every parameter (a .to() or a replaced weight splits them).

    Runs twice per layer per forward: the linears come as a plain tuple and their weights
    from `_parameters`, as nn.Module attribute lookups cost a microsecond or more each.
    """
    if weight is None or not linears:
        return False
    row = weight.stride(0) * weight.element_size()
    ptr = weight.data_ptr()
    for lin in linears:
        w = lin._parameters["weight"]
        if w is None or w.data_ptr() != ptr:
            return False
        ptr += w.shape[0] * row
    return True


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, sliding: bool):
        super().__init__()
        self.self_attn = SelfAttention(cfg)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.sliding = sliding
        self.window = cfg.window if sliding else 0

    def fuse(self) -> None:
        self.self_attn.fuse()
        self.mlp.fuse()


def materialize(module: nn.Module, dtype: torch.dtype, device) -> None:
    """Give every parameter built on the meta device real, uninitialised storage.

    What module.to(dtype).to_empty(device) does, with torch.empty: their meta-tensor path
    runs torch's Python decompositions, whose first use imports sympy (seconds of startup).
    Every tensor is then written by seeded_init or the checkpoint loader.
    """
    for m in module.modules():
        for name, p in m._parameters.items():
            if p is not None:
                m._parameters[name] = nn.Parameter(torch.empty(p.shape, dtype=dtype, device=device),
                                                   requires_grad=False)


@torch.no_grad()
def seeded_init(module: nn.Module, seed: int, scale_out: float = 1.0) -> None:
    """Deterministic random weights: N(0, 1/fan_in) for projections, N(0, 1) for embeddings.

    `scale_out` scales o_proj and down_proj, i.e. how much each layer adds to the
    residual stream (a drafter's own layer uses it to tune its disagreement).
    """
    gens: dict[str, torch.Generator] = {}
    for name, p in module.named_parameters():
        if name.endswith("norm.weight") or "layernorm" in name:
            p.fill_(1.0)
            continue
        # One generator per device: on a GPU the big shapes are drawn where they live.
        gen = gens.setdefault(str(p.device), torch.Generator(device=p.device).manual_seed(seed))
        w = torch.randn(p.shape, generator=gen, dtype=torch.float32, device=p.device)
        if "embed" not in name:
            w *= p.shape[-1] ** -0.5
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            w *= scale_out
        p.copy_(w.to(p.dtype))
