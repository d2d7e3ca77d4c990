"""A checkpoint directory's config.json read as a model shape, without torch.

Sizing a pool for a checkpoint reads its shape only (mini_engine.config.pools), so this
reads JSON and nothing else; loading the weights is mini_engine.model.loader's. Every
problem is one line naming it (CheckpointError), never a traceback.
"""

from __future__ import annotations

from pathlib import Path

from mini_engine.config.shapes import DTYPE_BYTES, ModelConfig
from mini_engine.errors import KVBenchError
from mini_engine.files import failure, read_document

ARCHITECTURES = {"LlamaForCausalLM": "llama", "Qwen3ForCausalLM": "qwen3"}
REQUIRED_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
# Bounds on config.json's sizes, far above any real model: a layer count of 10^12 built a
# tuple of that many layer types (MemoryError), a 500-digit vocab_size overflowed the
# float of the sizing's message (OverflowError), both tracebacks.
MAX_SIZE = 2**31 - 1
MAX_LAYERS = 4096
DTYPE_KEYS = ("torch_dtype", "dtype")  # transformers 5 writes dtype


class CheckpointError(KVBenchError):
    """A checkpoint directory is missing, incomplete, unsupported or does not fit its config."""


CONFIG = "checkpoint config"  # what a config.json failure calls the file


def read_hf_config(path: Path) -> dict:
    """A checkpoint directory's config.json as a dict; CheckpointError (one line) when it is missing or bad."""
    if not path.exists():
        raise CheckpointError(f"checkpoint directory {str(path)!r} does not exist")
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {str(path)!r} is not a directory (expected config.json + *.safetensors)")
    cfg_file = path / "config.json"
    data = read_document(cfg_file, CONFIG, CheckpointError, fmt="json",
                         missing="a checkpoint directory holds config.json and *.safetensors weight files")
    if not isinstance(data, dict):
        raise failure(CheckpointError, CONFIG, cfg_file, "must hold a JSON object")
    return data


def config_from_hf(data: dict, path: Path, dtype: str | None) -> ModelConfig:
    archs = data.get("architectures") or []
    if isinstance(archs, str):
        archs = [archs]
    arch = next((ARCHITECTURES[a] for a in archs if isinstance(a, str) and a in ARCHITECTURES), None)
    if arch is None:
        raise CheckpointError(
            f"checkpoint {str(path)!r}: unsupported architecture {archs or data.get('model_type')!r} "
            f"(supported: {', '.join(ARCHITECTURES)})")
    sizes = {k: _number(data, k, path, int) for k in REQUIRED_KEYS}
    if sizes["num_hidden_layers"] > MAX_LAYERS:
        raise CheckpointError(f"checkpoint {str(path)!r}: config.json 'num_hidden_layers' must be at most {MAX_LAYERS} "
                              f"(got {sizes['num_hidden_layers']})")
    _check_dtype(data, path)
    heads, hidden = sizes["num_attention_heads"], sizes["hidden_size"]
    # Optional keys: absent (or null) means the HF default, anything else must be valid.
    kv_heads = _number(data, "num_key_value_heads", path, int, heads)
    head_dim = _number(data, "head_dim", path, int, hidden // heads or 1)
    if heads % kv_heads:
        raise CheckpointError(f"checkpoint {str(path)!r}: num_attention_heads={heads} is not a multiple of num_key_value_heads={kv_heads}")
    tie = data.get("tie_word_embeddings", False)
    if not isinstance(tie, bool):
        raise CheckpointError(f"checkpoint {str(path)!r}: tie_word_embeddings must be true or false (got {tie!r})")
    data = _rope_parameters(data, path)
    rope_scaling = _rope_scaling(data.get("rope_scaling"), path)
    if dtype is None:
        dtype = "float32"  # exact on CPU; bf16 checkpoints are upcast on load
    return ModelConfig(
        name=path.name, vocab_size=sizes["vocab_size"], hidden_size=hidden,
        num_layers=sizes["num_hidden_layers"], num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
        intermediate_size=sizes["intermediate_size"], rope_theta=_number(data, "rope_theta", path, float, 10000.0),
        rms_eps=_number(data, "rms_norm_eps", path, float, 1e-6), qk_norm=arch == "qwen3",
        tie_embeddings=tie, dtype=dtype, architecture=arch, rope_scaling=rope_scaling,
    )


def _number(data: dict, key: str, path: Path, kind: type, default=None):
    """A positive int (or float) from config.json; `default` when the key is optional and absent."""
    value = data.get(key)
    if value is None and default is not None:
        return default
    # bool is an int in Python but never a size; a float field accepts JSON integers too.
    ok = (isinstance(value, int) or (kind is float and isinstance(value, float))) and not isinstance(value, bool)
    if not ok or value <= 0:
        what = "positive integer" if kind is int else "positive number"
        raise CheckpointError(f"checkpoint {str(path)!r}: config.json needs a {what} {key!r} (got {value!r})")
    if kind is int and value > MAX_SIZE:
        raise CheckpointError(f"checkpoint {str(path)!r}: config.json {key!r} must be at most {MAX_SIZE} "
                              f"(got one of {len(str(value))} digits)")
    return kind(value)


def _check_dtype(data: dict, path: Path) -> None:
    """The checkpoint's declared dtype, where it declares one, is one the engine serves:
    an unknown one (float128) was sized silently as float32."""
    for key in DTYPE_KEYS:
        value = data.get(key)
        if value is not None and value not in DTYPE_BYTES:
            raise CheckpointError(f"checkpoint {str(path)!r}: config.json {key!r} must be one of "
                                  f"{', '.join(DTYPE_BYTES)} (got {value!r})")


def _rope_parameters(data: dict, path: Path) -> dict:
    """transformers 5 writes RoPE as rope_parameters {rope_theta, rope_type, ...} in place of
    the top-level rope_theta and rope_scaling: read it as those (the top level wins)."""
    params = data.get("rope_parameters")
    if params is None:
        return data
    if not isinstance(params, dict) or ("rope_theta" not in params and "rope_type" not in params):
        raise CheckpointError(f"checkpoint {str(path)!r}: rope_parameters must be one JSON object with rope_theta "
                              "(per-layer-type RoPE is not supported)")
    out = dict(data)
    if out.get("rope_theta") is None and "rope_theta" in params:
        out["rope_theta"] = params["rope_theta"]
    if not out.get("rope_scaling"):
        out["rope_scaling"] = params
    return out


def _rope_scaling(scaling, path: Path) -> tuple[float, float, float, int] | None:
    if not scaling:
        return None
    if not isinstance(scaling, dict):
        raise CheckpointError(f"checkpoint {str(path)!r}: rope_scaling must be a JSON object")
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind in (None, "default"):
        return None
    if kind != "llama3":
        raise CheckpointError(f"checkpoint {str(path)!r}: rope_scaling type {kind!r} is not supported "
                              "(supported: default, llama3)")
    try:
        return (float(scaling["factor"]), float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"]),
                int(scaling["original_max_position_embeddings"]))
    except (KeyError, TypeError, ValueError):
        raise CheckpointError(f"checkpoint {str(path)!r}: llama3 rope_scaling needs factor, low_freq_factor, "
                              "high_freq_factor and original_max_position_embeddings") from None
