"""The KV bytes one token slot costs, for a run's model shape.

Bytes per slot = layers x KV heads x head dim x dtype bytes x 2 (K and V). With
sliding-window attention the layers split between the two pools: the full pool
holds the full layers' KV of a slot, the SWA pool the sliding layers'. The named
shapes are the engine's one table (mini_engine/config/shapes.py SHAPES); a
checkpoint directory gives its config.json. Bytes are counted in the dtype the
model is served in (the shape's declared dtype, a checkpoint's ``torch_dtype``),
not the float32 a CPU run upcasts to, so a CPU night and a GPU night agree.
The accounting-only backend (model ``none``) loads no model: its shape is
unknown and its rows carry token slots only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mini_engine.config.hf_config import config_from_hf, read_hf_config
from mini_engine.config.shapes import DTYPE_BYTES, SHAPES, ModelConfig, layer_types_for, named_shape
from mini_engine.errors import KVBenchError


@dataclass(frozen=True)
class KVShape:
    name: str
    layers: int
    kv_heads: int
    head_dim: int
    dtype: str
    full_layers: int  # layers whose KV lives in the full pool
    swa_layers: int  # sliding layers, KV in the SWA pool

    @property
    def per_layer(self) -> int:
        """K and V of one slot in one layer."""
        return 2 * self.kv_heads * self.head_dim * DTYPE_BYTES[self.dtype]

    @property
    def full_bytes(self) -> int:
        return self.per_layer * self.full_layers

    @property
    def swa_bytes(self) -> int:
        return self.per_layer * self.swa_layers

    @property
    def all_bytes(self) -> int:
        return self.per_layer * self.layers


def named(name: str, layer_pattern: str | None = None) -> KVShape:
    """A shape of the engine's table, its layers split by the layer pattern."""
    return _of_model(named_shape(name), layer_pattern)


def shape_of(config: dict[str, Any], checkpoints: bool = True) -> KVShape | None:
    """The KV shape of a resolved run config, or None where no model is loaded.
    ``checkpoints=False``: named shapes only, no file read (rows read back from disk
    may come from another machine, or from anyone)."""
    model = config.get("model") or "none"
    if model == "none":
        return None
    if model in SHAPES:
        return named(model, config.get("layer_pattern"))
    return _of_checkpoint(str(model), config.get("layer_pattern")) if checkpoints else None


def _of_checkpoint(path: str, layer_pattern: str | None) -> KVShape | None:
    try:
        data = read_hf_config(Path(path))
        dtype = data.get("torch_dtype")
        mcfg = config_from_hf(data, Path(path), dtype if dtype in DTYPE_BYTES else None)
    except KVBenchError:
        return None  # the run itself reports an unreadable checkpoint
    return _of_model(mcfg, layer_pattern)


def _of_model(mcfg: ModelConfig, layer_pattern: str | None) -> KVShape:
    types = layer_types_for(layer_pattern or "all-global", mcfg.num_layers)
    sliding = sum(1 for t in types if t == "sliding")
    return KVShape(mcfg.name, mcfg.num_layers, mcfg.num_kv_heads, mcfg.head_dim, mcfg.dtype,
                   mcfg.num_layers - sliding, sliding)
