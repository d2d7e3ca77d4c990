"""Building blocks of a Llama / Qwen3 decoder layer.

Parameter names follow the Hugging Face checkpoints (q_proj, gate_proj,
input_layernorm, ...) so that a checkpoint's state dict loads without renaming.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from mini_engine.model.config import ModelConfig


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in at least float32: bf16 variance loses too much.
        acc = x.to(torch.float64 if x.dtype == torch.float64 else torch.float32)
        acc = acc * torch.rsqrt(acc.pow(2).mean(-1, keepdim=True) + self.eps)
        return (acc * self.weight.to(acc.dtype)).to(x.dtype)


def rope_cos_sin(positions: torch.Tensor, cfg: ModelConfig, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    d = cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, device=positions.device, dtype=acc) / d))
    if cfg.rope_scaling is not None:
        inv_freq = llama3_scaled(inv_freq, *cfg.rope_scaling)
    freqs = positions.to(acc)[:, None] * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


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


class MLP(nn.Module):
    def __init__(self, hidden: int, inter: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
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

    def qkv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        T = x.shape[0]
        q = self.q_proj(x).view(T, self.num_heads, self.head_dim)
        k = self.k_proj(x).view(T, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).view(T, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, sliding: bool):
        super().__init__()
        self.self_attn = SelfAttention(cfg)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.sliding = sliding
        self.window = cfg.window if sliding else 0


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
