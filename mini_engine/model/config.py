"""The torch side of a model's shape: the torch dtype of each dtype name.

The shapes themselves are plain data (mini_engine.config.shapes), read without torch
when a pool is sized; only a model that runs needs the torch dtype.
"""

from __future__ import annotations

import torch

from mini_engine.config.shapes import ModelConfig

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}


def torch_dtype(mcfg: ModelConfig) -> torch.dtype:
    return DTYPES[mcfg.dtype]
