"""Model shapes as plain data, without torch: the layer patterns, the dtype sizes, the
shapes of the tiny test model and the GPU-sized random ones.

A layer is 'full' (attends to every earlier position) or 'sliding' (only the last
`window` positions, KV kept in the SWA pool). The pattern names count local:global,
so '3:1' is three sliding layers then one full layer, repeated. Sizing a pool reads
these shapes; only running a model needs torch (mini_engine.model.config maps the
dtype names here to torch dtypes).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from mini_engine.errors import ConfigError

DEVICES = ("cpu", "cuda")
# local:global layer ratios; "all-global" means no SWA layer at all. Defined once here;
# a config checks its layer_pattern against it and the model builds its layer types from it.
LAYER_PATTERNS = {
    "all-local": (1, 0),
    "1:1": (1, 1),
    "3:1": (3, 1),
    "5:1": (5, 1),
    "all-global": (0, 1),
}
# Bytes of one element of each dtype a model may run in (the keys are the model's dtypes).
DTYPE_BYTES = {"float32": 4, "float64": 8, "bfloat16": 2, "float16": 2}
# The drafter shares the target's lowest layers: all four of tiny's, four of a GPU shape
# (its own KV costs a layer's worth of pool per shared layer).
DEFAULT_DRAFT_LAYERS = 4


def layer_types_for(pattern: str, num_layers: int) -> tuple[str, ...]:
    if pattern == "all-global":
        return ("full",) * num_layers
    if pattern == "all-local":
        return ("sliding",) * num_layers
    if pattern not in LAYER_PATTERNS:
        raise ConfigError(f"layer_pattern must be one of {', '.join(LAYER_PATTERNS)} (got {pattern!r})")
    local = int(pattern.split(":")[0])
    period = local + 1
    return tuple("full" if i % period == local else "sliding" for i in range(num_layers))


@dataclass(frozen=True)
class ModelConfig:
    name: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rope_theta: float = 10000.0
    rms_eps: float = 1e-6
    qk_norm: bool = False  # Qwen3 normalises q and k per head before RoPE
    tie_embeddings: bool = False
    dtype: str = "float32"
    layer_types: tuple[str, ...] = field(default=())
    window: int = 0  # sliding window of the 'sliding' layers; 0 when there are none
    architecture: str = "llama"  # 'llama' | 'qwen3' (only decides HF names on export)
    seed: int = 0
    # Llama 3.1 RoPE scaling: (factor, low_freq_factor, high_freq_factor, original_max_positions)
    rope_scaling: tuple[float, float, float, int] | None = None

    def __post_init__(self) -> None:
        if not self.layer_types:
            object.__setattr__(self, "layer_types", ("full",) * self.num_layers)
        if len(self.layer_types) != self.num_layers:
            raise ConfigError(f"layer_types has {len(self.layer_types)} entries for {self.num_layers} layers")
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(f"num_heads={self.num_heads} must be a multiple of num_kv_heads={self.num_kv_heads}")
        if "sliding" in self.layer_types and self.window < 1:
            raise ConfigError(f"window must be an integer >= 1 when a layer is sliding (got {self.window})")
        if self.dtype not in DTYPE_BYTES:
            raise ConfigError(f"dtype must be one of {', '.join(DTYPE_BYTES)} (got {self.dtype!r})")

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def has_sliding(self) -> bool:
        return "sliding" in self.layer_types

    def with_pattern(self, pattern: str, window: int) -> "ModelConfig":
        types = layer_types_for(pattern, self.num_layers)
        return replace(self, layer_types=types, window=window if "sliding" in types else 0)

    def kv_bytes_per_token(self, pool: str = "all") -> int:
        """KV bytes one token occupies: 'full' layers, 'sliding' layers, or 'all'."""
        per_layer = 2 * self.num_kv_heads * self.head_dim * self.dtype_bytes
        if pool == "all":
            return per_layer * self.num_layers
        return per_layer * sum(1 for t in self.layer_types if t == pool)

    def num_params(self) -> int:
        h, kv = self.hidden_size, self.num_kv_heads * self.head_dim
        attn = h * self.num_heads * self.head_dim * 2 + h * kv * 2
        mlp = 3 * h * self.intermediate_size
        embed = self.vocab_size * h * (1 if self.tie_embeddings else 2)
        return self.num_layers * (attn + mlp) + embed


SHAPES: dict[str, ModelConfig] = {
    # Small enough that a CPU forward over a few hundred tokens takes milliseconds.
    "tiny": ModelConfig(
        name="tiny", vocab_size=1024, hidden_size=64, num_layers=4, num_heads=4, num_kv_heads=2,
        head_dim=16, intermediate_size=128, rope_theta=10000.0, qk_norm=True, architecture="qwen3",
    ),
    "qwen3-0.6b": ModelConfig(
        name="qwen3-0.6b", vocab_size=151936, hidden_size=1024, num_layers=28, num_heads=16,
        num_kv_heads=8, head_dim=128, intermediate_size=3072, rope_theta=1_000_000.0,
        qk_norm=True, tie_embeddings=True, dtype="bfloat16", architecture="qwen3",
    ),
    "llama-3.1-8b": ModelConfig(
        name="llama-3.1-8b", vocab_size=128256, hidden_size=4096, num_layers=32, num_heads=32,
        num_kv_heads=8, head_dim=128, intermediate_size=14336, rope_theta=500_000.0, rms_eps=1e-5,
        dtype="bfloat16", architecture="llama", rope_scaling=(8.0, 1.0, 4.0, 8192),
    ),
}


def named_shape(name: str) -> ModelConfig:
    if name not in SHAPES:
        raise ConfigError(f"model must be one of {', '.join(SHAPES)} or a checkpoint directory (got {name!r})")
    return SHAPES[name]
