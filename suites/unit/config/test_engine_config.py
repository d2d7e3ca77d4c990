"""EngineConfig validation: every bad option is one line naming it."""

from __future__ import annotations

import pytest

from mini_engine.config.engine_config import EngineConfig, load_toml
from mini_engine.errors import ConfigError


def test_defaults_resolve_per_algorithm():
    assert EngineConfig(spec="dflash").block_size == 16
    e = EngineConfig(spec="eagle")
    assert (e.topk, e.steps, e.num_draft_tokens) == (1, 3, 4)
    assert EngineConfig(spec="eagle", topk=4, steps=3).num_draft_tokens == 13
    assert EngineConfig().block_size is None and EngineConfig().layer_pattern == "all-global"
    assert EngineConfig(window=64).layer_pattern == "1:1"
    assert EngineConfig(pool_tokens=1000, page_size=16).num_pages == 62


def test_max_accept():
    assert EngineConfig(spec="dflash", block_size=8).max_accept == 8
    assert EngineConfig(spec="eagle", steps=3, topk=4, num_draft_tokens=8).max_accept == 4
    assert EngineConfig(spec="eagle", steps=5, topk=4, num_draft_tokens=3).max_accept == 3


@pytest.mark.parametrize("options, words", [
    ({"page_size": 0}, "page_size must be an integer >= 1"),
    ({"spec": "medusa"}, "spec must be one of none, eagle, dflash"),
    ({"block_size": 16}, "block_size applies to spec=dflash only"),
    ({"spec": "eagle", "block_size": 8}, "block_size applies to spec=dflash only"),
    ({"spec": "dflash", "topk": 2}, "topk applies to spec=eagle only"),
    ({"spec": "dflash", "block_size": 0}, "block_size must be an integer >= 1"),
    ({"spec": "eagle", "topk": 1, "steps": 3, "num_draft_tokens": 9}, "num_draft_tokens must be <= steps * topk + 1 = 4"),
    ({"window": 64, "layer_pattern": "all-global"}, "needs SWA layers"),
    ({"layer_pattern": "3:1"}, "has SWA layers and needs a window"),
    ({"window": 0}, "window must be an integer >= 1"),
    ({"layer_pattern": "2:1", "window": 8}, "layer_pattern must be one of"),
    ({"policy": "exact"}, "policy must be one of aligned, unaligned"),
    ({"free_policy": "gc"}, "free_policy must be one of segment, floor, dedup"),
    ({"audit": "loud"}, "audit must be one of record, raise, off"),
    ({"pool_tokens": 8, "page_size": 16}, "pool_tokens must hold at least one page"),
    ({"pool_tokens": 1000, "mem_fraction": 0.5}, "exclusive"),
    ({"mem_fraction": 1.5}, "mem_fraction must be in (0, 1]"),
    ({"accept_len": 3}, "accept_len applies to speculative decoding only"),
    ({"spec": "dflash", "accept_len": 17}, "accept_len must be in 1..16"),
    ({"spec": "dflash", "accept_mean": 0.5}, "accept_mean must be a number >= 1.0"),
    ({"spec": "dflash", "accept_len": 2, "accept_mean": 3.0}, "exclusive"),
    ({"seed": -1}, "seed must be an integer >= 0"),
    ({"temperature": -0.1}, "temperature must be a number >= 0.0"),
    ({"page_size": "16"}, "page_size must be an integer >= 1"),
    ({"spec": "dflash", "draft_layers": 2}, "draft_layers applies to a real model's drafter only"),
    ({"model": "tiny", "spec": "dflash", "draft_noise": -1.0}, "draft_noise must be a number >= 0.0"),
])
def test_bad_options_are_one_line(options, words):
    with pytest.raises(ConfigError) as info:
        EngineConfig.from_dict(options)
    msg = str(info.value)
    assert words in msg and "\n" not in msg


def test_unknown_key_is_named():
    with pytest.raises(ConfigError, match="unknown engine option 'page_sise'"):
        EngineConfig.from_dict({"page_sise": 16})


def test_round_trip_and_dashes():
    cfg = EngineConfig.from_dict({"spec": "dflash", "page-size": 64, "window": 128, "layer_pattern": "5:1"})
    again = EngineConfig.from_dict(cfg.to_dict())
    assert again == cfg and again.page_size == 64 and again.has_swa


def test_mem_fraction_sizes_pool_from_kv_bytes():
    cfg = EngineConfig(mem_fraction=0.01)
    assert cfg.num_pages > 0
    import os
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert cfg.num_pages == int(total * 0.01) // cfg.kv_bytes_per_token // cfg.page_size


def test_gpu_config_validates_on_any_machine():
    import torch

    cfg = EngineConfig(device="cuda", mem_fraction=0.3)  # a nightly GPU config, checked on a laptop
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="no CUDA device is visible"):
            cfg.num_pages
        from mini_engine.engine import Engine

        with pytest.raises(ConfigError, match="no CUDA device is visible"):
            Engine(EngineConfig(device="cuda"))


def test_named_model_kv_bytes():
    cfg = EngineConfig(model="qwen3-0.6b", mem_fraction=0.01)
    assert cfg.kv_bytes_per_token == 28 * 2 * 8 * 128 * 2
    assert EngineConfig(model="tiny").kv_bytes_per_token == 4 * 2 * 2 * 16 * 4


def test_toml(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text('spec = "eagle"\n[engine]\npage_size = 1\n')
    assert load_toml(p) == {"spec": "eagle", "page_size": 1}
    assert EngineConfig.from_toml(p) == EngineConfig(spec="eagle", page_size=1)
    p.write_text('spec = "eagle"\n[workload]\nnum_requests = 4\n')  # the harness's table, not the engine's
    with pytest.raises(ConfigError, match=r"unknown table \[workload\] \(allowed: \[engine\]\)"):
        load_toml(p)
    p.write_text("spec = \n")
    with pytest.raises(ConfigError, match="config file '.*': not valid TOML"):
        load_toml(p)
    with pytest.raises(ConfigError, match="config file '.*missing.toml': not found"):
        load_toml(tmp_path / "missing.toml")
    p.write_text("[model]\nx = 1\n")
    with pytest.raises(ConfigError, match=r"unknown table \[model\]"):
        load_toml(p)
    p.write_text("[engine.extra]\nx = 1\n")
    with pytest.raises(ConfigError, match=r"unknown table \[engine.extra\]"):
        load_toml(p)
