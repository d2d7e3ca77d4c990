"""Model shapes and layer patterns (plain data, no torch)."""

from __future__ import annotations

import pytest

from mini_engine.errors import ConfigError
from mini_engine.config.shapes import SHAPES, layer_types_for, named_shape


@pytest.mark.parametrize("pattern, want", [
    ("all-global", "FFFFFFFF"), ("all-local", "SSSSSSSS"), ("1:1", "SFSFSFSF"),
    ("3:1", "SSSFSSSF"), ("5:1", "SSSSSFSS"),
])
def test_layer_patterns(pattern, want):
    assert "".join("S" if t == "sliding" else "F" for t in layer_types_for(pattern, 8)) == want


def test_bad_pattern_and_missing_window():
    with pytest.raises(ConfigError, match="layer_pattern must be one of"):
        layer_types_for("2:1", 4)
    with pytest.raises(ConfigError, match="window must be an integer >= 1"):
        named_shape("tiny").with_pattern("1:1", 0)
    with pytest.raises(ConfigError, match="model must be one of"):
        named_shape("gpt-2")


def test_named_shapes_have_their_published_sizes():
    assert round(SHAPES["qwen3-0.6b"].num_params() / 1e9, 2) == 0.60
    assert round(SHAPES["llama-3.1-8b"].num_params() / 1e9, 1) == 8.0
    assert SHAPES["tiny"].num_params() < 1_000_000


def test_kv_bytes_per_token_splits_by_pool():
    cfg = named_shape("qwen3-0.6b")
    assert cfg.kv_bytes_per_token() == 28 * 2 * 8 * 128 * 2  # bf16
    swa = cfg.with_pattern("3:1", 128)
    assert swa.kv_bytes_per_token("sliding") == 21 * 2 * 8 * 128 * 2
    assert swa.kv_bytes_per_token("full") + swa.kv_bytes_per_token("sliding") == swa.kv_bytes_per_token()
