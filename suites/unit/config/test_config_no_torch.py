"""The engine's config reads no torch: options, profiles, model shapes and pool sizing
are plain data, so building an EngineConfig (and sizing a pool for a named model or a
checkpoint's config.json) runs in an interpreter where torch cannot be imported. Before
the shapes were torch-free, mini_engine.model.config imported torch for a dtype table
and the config reached it through lazy imports."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

BLOCK_TORCH = "import sys\nsys.modules['torch'] = None\n"


def run_without_torch(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK_TORCH + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=300)


def test_importing_the_config_loads_no_torch():
    got = subprocess.run([sys.executable, "-c", "import mini_engine.config, sys; print('torch' in sys.modules)"],
                         capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr
    assert got.stdout.split() == ["False"]


def test_sizing_a_named_model_and_a_checkpoint_needs_no_torch(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128}))
    got = run_without_torch(f"""
        from mini_engine.config.engine_config import EngineConfig
        from mini_engine.config.pools import footprint
        named = footprint(EngineConfig(model="qwen3-0.6b", mem_fraction=0.3))
        ckpt = footprint(EngineConfig(model={str(ckpt)!r}, mem_fraction=0.3))
        print(named.kv_bytes_per_token, ckpt.kv_bytes_per_token)
    """)
    assert got.returncode == 0, got.stderr
    # float32 on the CPU: 28 layers x K,V x 8 heads x 128 x 4 bytes; 2 x 2 x 2 x 16 x 4
    assert got.stdout.split() == [str(28 * 2 * 8 * 128 * 4), str(2 * 2 * 2 * 16 * 4)]
