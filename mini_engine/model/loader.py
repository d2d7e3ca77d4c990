"""Load a local Hugging Face checkpoint directory (Llama or Qwen3); nothing is fetched.

A directory holds config.json and one or more *.safetensors files. Parameter names
are the HF ones, which our modules use as is; a tied LM head may be absent. Every
problem is one line naming it (CheckpointError), never a traceback.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from mini_engine.config.hf_config import ARCHITECTURES, CheckpointError, config_from_hf, read_hf_config
from mini_engine.config.shapes import SHAPES, ModelConfig, named_shape
from mini_engine.model.config import DTYPES


@dataclass
class Weights:
    path: Path
    files: list[Path]

    def load_into(self, model: torch.nn.Module) -> None:
        from safetensors import SafetensorError  # safetensors: optional, loaded only on this path
        from safetensors.torch import load_file  # safetensors: optional, loaded only on this path

        expected = model.state_dict()
        seen: set[str] = set()
        for f in self.files:
            try:
                tensors = load_file(str(f), device="cpu")
            except (SafetensorError, OSError, ValueError) as err:
                raise CheckpointError(f"checkpoint file {f.name} in {self.path} is not readable safetensors: {err}") from None
            for name, t in tensors.items():
                if name.endswith("rotary_emb.inv_freq"):
                    continue  # recomputed from rope_theta
                if name == "lm_head.weight" and "lm_head.weight" not in expected:
                    continue  # tied to the embedding: some exports still write it
                if name not in expected:
                    raise CheckpointError(f"checkpoint {self.path}: unexpected parameter {name!r} in {f.name}")
                want = expected[name]
                if tuple(t.shape) != tuple(want.shape):
                    raise CheckpointError(
                        f"checkpoint {self.path}: {name} has shape {tuple(t.shape)}, "
                        f"config.json implies {tuple(want.shape)}")
                with torch.no_grad():
                    want.copy_(t.to(want.dtype))
                seen.add(name)
        missing = [n for n in expected if n not in seen]
        if missing:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise CheckpointError(f"checkpoint {self.path}: missing parameter {missing[0]!r}{more}")


def load_checkpoint(path: str | Path, dtype: str | None = None) -> tuple[ModelConfig, Weights]:
    p = Path(path)
    mcfg = config_from_hf(read_hf_config(p), p, dtype)
    files = sorted(p.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"checkpoint {str(p)!r} has no *.safetensors weight files")
    return mcfg, Weights(p, files)


def resolve_model(name: str, dtype: str | None = None, device: str = "cpu") -> tuple[ModelConfig, Weights | None]:
    """'tiny' or a shape name (seeded random weights), or a checkpoint directory."""
    if dtype is not None and dtype not in DTYPES:
        raise CheckpointError(f"dtype must be one of {', '.join(DTYPES)} (got {dtype!r})")
    if name in SHAPES:
        mcfg = named_shape(name)
        if dtype is not None:
            mcfg = replace(mcfg, dtype=dtype)
        elif device == "cpu" and mcfg.dtype == "bfloat16":
            mcfg = replace(mcfg, dtype="float32")
        return mcfg, None
    if "/" not in name and not Path(name).exists():
        raise CheckpointError(
            f"model must be one of {', '.join(SHAPES)} or a checkpoint directory (got {name!r})")
    return load_checkpoint(name, dtype)


def model_vocab_size(name: str) -> int:
    """The vocabulary of a shape name or a checkpoint directory, without loading weights."""
    if name in SHAPES:
        return named_shape(name).vocab_size
    p = Path(name)
    return config_from_hf(read_hf_config(p), p, None).vocab_size


def save_checkpoint(model: torch.nn.Module, mcfg: ModelConfig, path: str | Path) -> Path:
    """Write `model` as an HF-format directory (how tests build checkpoints on disk)."""
    from safetensors.torch import save_file  # safetensors: optional, loaded only on this path

    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    arch = {v: k for k, v in ARCHITECTURES.items()}[mcfg.architecture]
    config = {
        "architectures": [arch], "model_type": mcfg.architecture, "vocab_size": mcfg.vocab_size,
        "hidden_size": mcfg.hidden_size, "num_hidden_layers": mcfg.num_layers,
        "num_attention_heads": mcfg.num_heads, "num_key_value_heads": mcfg.num_kv_heads,
        "head_dim": mcfg.head_dim, "intermediate_size": mcfg.intermediate_size,
        "rope_theta": mcfg.rope_theta, "rms_norm_eps": mcfg.rms_eps,
        "tie_word_embeddings": mcfg.tie_embeddings, "torch_dtype": mcfg.dtype,
    }
    if mcfg.rope_scaling is not None:
        f, lo, hi, orig = mcfg.rope_scaling
        config["rope_scaling"] = {"rope_type": "llama3", "factor": f, "low_freq_factor": lo,
                                  "high_freq_factor": hi, "original_max_position_embeddings": orig}
    (p / "config.json").write_text(json.dumps(config, indent=2))
    tensors = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(tensors, str(p / "model.safetensors"))
    return p
