"""mem_fraction sizes the KV pool after the weights and the drafter's KV: worked numbers."""

from __future__ import annotations

import pytest

from mini_engine.config import engine_config
from mini_engine.config.engine_config import EngineConfig
from mini_engine.errors import ConfigError
from mini_engine.config.pools import Footprint, footprint, pool_tokens

H200 = 140 << 30  # 150,323,855,360 bytes

# Qwen3-0.6B in bf16: 28 layers of (1024*2048*2 + 1024*1024*2 attention + 3*1024*3072 MLP)
# = 28 * 15,728,640 = 440,401,920, plus the tied 151,936 x 1024 embedding 155,582,464:
# 595,984,384 parameters, 1,191,968,768 bytes. KV: 28 layers * K,V * 8 heads * 128 * 2 bytes.
QWEN_WEIGHTS = 1_191_968_768
QWEN_KV = 114_688
# The drafter's own weights: fc 2*1024*1024 + one layer 15,728,640 + mask embedding 1024
# = 17,826,816 parameters (35,653,632 bytes); its KV: 4 shared layers + its own, 4096 bytes each.
DRAFT_WEIGHTS = 35_653_632
DRAFT_KV = 5 * 4096


def test_qwen3_plain_on_an_h200():
    fp = footprint(EngineConfig(model="qwen3-0.6b", device="cuda", mem_fraction=0.3))
    assert fp == Footprint(QWEN_WEIGHTS, QWEN_KV, 0)
    # 0.3 * 150,323,855,360 = 45,097,156,608; minus the weights 43,905,187,840; / 114,688
    assert pool_tokens(H200, 0.3, fp) == 382_822
    # The old sizing (weights ignored) promised 393,216 tokens: 10,394 more than fit.
    assert int(H200 * 0.3) // QWEN_KV == 393_216


def test_qwen3_dflash_pays_for_the_drafter():
    fp = footprint(EngineConfig(model="qwen3-0.6b", device="cuda", spec="dflash", block_size=16, mem_fraction=0.3))
    assert fp == Footprint(QWEN_WEIGHTS + DRAFT_WEIGHTS, QWEN_KV, DRAFT_KV)
    # (45,097,156,608 - 1,227,622,400) / (114,688 + 20,480) = 43,869,534,208 / 135,168
    assert pool_tokens(H200, 0.3, fp) == 324_555


def test_draft_layers_set_the_drafter_kv():
    fp = footprint(EngineConfig(model="qwen3-0.6b", device="cuda", spec="eagle", draft_layers=1, mem_fraction=0.3))
    assert fp.draft_kv_bytes_per_token == 2 * 4096


def test_accounting_only_loads_nothing():
    fp = footprint(EngineConfig(spec="dflash", mem_fraction=0.5))
    assert fp == Footprint(0, QWEN_KV, 0)  # the nominal shape is Qwen3-0.6B's KV
    assert pool_tokens(1 << 30, 0.5, fp) == (1 << 29) // QWEN_KV == 4681


def test_bf16_shape_on_cpu_counts_float32():
    fp = footprint(EngineConfig(model="qwen3-0.6b", mem_fraction=0.3))
    assert fp == Footprint(2 * QWEN_WEIGHTS, 2 * QWEN_KV, 0)


def test_weights_larger_than_the_fraction_are_refused():
    fp = Footprint(QWEN_WEIGHTS, QWEN_KV)
    with pytest.raises(ConfigError, match=r"mem_fraction=0.5 of 1.0 GiB leaves no room .* 1.11 GiB of weights"):
        pool_tokens(1 << 30, 0.5, fp)
    assert pool_tokens(QWEN_WEIGHTS + QWEN_KV, 1.0, fp) == 1  # exactly one token fits


def test_engine_config_sizes_its_pool_this_way(monkeypatch):
    monkeypatch.setattr(engine_config, "_device_memory_bytes", lambda device: H200)
    cfg = EngineConfig(model="qwen3-0.6b", device="cuda", spec="dflash", block_size=16, page_size=16, mem_fraction=0.3)
    assert cfg.num_pages == 324_555 // 16 == 20_284
