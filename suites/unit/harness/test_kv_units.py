"""Memory in token slots and KV bytes beside pages (harness/core/kv_units.py, kv_shape.py)."""

from __future__ import annotations

import pytest

from harness.core.kv_shape import named, shape_of
from harness.core.kv_units import derive, pages_of, tokens_of
from harness.core.metrics import DERIVED, METRICS
from harness.run.runner import run_config

# The smoke suite's DFLASH config (SGLang 0.5.23), swept over the page size.
SMOKE_DFLASH = dict(workload="uniform", num_requests=12, input_len=160, output_len=96, min_len=40, seed=7,
                    pool_tokens=8192, spec="dflash", block_size=16)


def test_a_page_size_sweep_holds_more_tokens_where_it_holds_fewer_pages():
    rows = {ps: run_config({**SMOKE_DFLASH, "page_size": ps}) for ps in (1, 16, 64)}
    pages = [rows[ps]["metrics"]["peak_pages_held"] for ps in (1, 16, 64)]
    tokens = [rows[ps]["metrics"]["peak_tokens_held"] for ps in (1, 16, 64)]
    # The shape the dashboards hid: pages fall 50x while the memory held rises 22%.
    assert pages == [1830, 118, 35]
    assert tokens == [1830, 1888, 2240] == [1830 * 1, 118 * 16, 35 * 64]
    assert all(rows[ps]["status"] == "ok" for ps in rows)
    # The accounting-only backend loads no model: no shape, so no bytes are made up.
    assert "peak_kv_bytes_held" not in rows[16]["metrics"]


def test_the_named_shapes_cost_what_their_configs_say_per_token():
    # qwen3-0.6b: 28 layers x 8 KV heads x 128 dims x 2 bytes (bf16) x 2 (K, V) = 114688 bytes a token.
    q = named("qwen3-0.6b")
    assert (q.layers, q.kv_heads, q.head_dim, q.dtype) == (28, 8, 128, "bfloat16")
    assert q.all_bytes == q.full_bytes == 28 * 8 * 128 * 2 * 2 == 114688 and q.swa_bytes == 0
    # llama-3.1-8b: 32 x 8 x 128 x 2 x 2 = 131072 (128 KiB a token).
    assert named("llama-3.1-8b").all_bytes == 131072
    # 3:1 on 28 layers: every fourth layer full, 7 full and 21 sliding, 4096 bytes each.
    swa = named("qwen3-0.6b", "3:1")
    assert (swa.full_layers, swa.swa_layers, swa.full_bytes, swa.swa_bytes) == (7, 21, 28672, 86016)


def test_bytes_take_both_pools_at_the_step_their_sum_peaks():
    shape = named("qwen3-0.6b", "3:1")
    metrics = {"peak_pages_held": 5, "peak_swa_pages_held": 4, "leaked_pages": 1, "leaked_swa_pages": 2,
               "predicted_leaked_pages": 1, "predicted_leaked_swa_pages": 2, "peak_reserved_slots": 10,
               "peak_stranded_slots": 3}
    series = {"held": [2, 5, 3], "swa_held": [4, 1, 1]}
    out = derive({"page_size": 16}, metrics, series, shape=shape)
    assert out["peak_tokens_held"] == 80 and out["peak_swa_tokens_held"] == 64
    # step 0: 2*16*28672 + 4*16*86016 = 917504 + 5505024 = 6422528
    # step 1: 5*16*28672 + 1*16*86016 = 2293760 + 1376256 = 3670016 (the full pool's peak, not the sum's)
    assert out["peak_kv_bytes_held"] == 6422528
    assert out["leaked_tokens"] == 16 and out["leaked_kv_bytes"] == 16 * 28672 == 458752
    assert out["leaked_swa_tokens"] == 32 and out["leaked_swa_kv_bytes"] == 32 * 86016
    # reserved and stranded slots sit in every layer's KV: 114688 bytes each
    assert out["peak_reserved_kv_bytes"] == 10 * 114688 and out["peak_stranded_kv_bytes"] == 3 * 114688


def test_a_config_knows_its_shape_only_when_it_loads_a_model(tmp_path):
    assert shape_of({"model": "none"}) is None
    assert shape_of({"model": "tiny", "layer_pattern": "1:1"}).full_layers == 2
    ckpt = tmp_path / "m"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(
        '{"architectures": ["LlamaForCausalLM"], "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 3,'
        ' "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "torch_dtype": "bfloat16"}')
    s = shape_of({"model": str(ckpt)})
    # 3 layers x 2 KV heads x head dim 16 (64 / 4) x 2 bytes (its torch_dtype) x 2
    assert s.all_bytes == 3 * 2 * 16 * 2 * 2 == 384
    assert shape_of({"model": str(tmp_path / "absent")}) is None


def test_every_page_figure_has_its_token_figure_declared():
    for name, m in METRICS.items():
        if m.unit == "pages":
            assert tokens_of(name) != name, f"{name} has no token-slot figure"
            assert pages_of(tokens_of(name)) == name
    assert all(m.kind == "counter" for m in DERIVED)
    assert tokens_of("peak_stranded_slots") == "peak_stranded_slots"


@pytest.mark.parametrize("ps", [1, 16])
def test_derive_is_pages_times_page_size_without_a_shape(ps):
    assert derive({"page_size": ps}, {"peak_pages_held": 7}) == {"peak_tokens_held": 7 * ps}


def test_rows_recorded_before_the_token_figures_get_them_when_read(tmp_path):
    from harness.core.kv_units import fill_units
    from harness.store.results import append_row, load_rows

    old = {"key": "a", "config": {"page_size": 64, "model": "none"}, "status": "ok", "violations": {},
           "metrics": {"peak_pages_held": 35, "leaked_pages": 0}}
    ckpt = {"key": "b", "config": {"page_size": 16, "model": str(tmp_path)}, "status": "ok", "violations": {},
            "metrics": {"peak_pages_held": 2}, "series": {"held": [2]}}
    (tmp_path / "config.json").write_text("{}")  # a checkpoint a row names is never read back
    append_row(tmp_path / "results.jsonl", old)
    append_row(tmp_path / "results.jsonl", ckpt)
    a, b = load_rows(tmp_path / "results.jsonl")
    assert a["metrics"]["peak_tokens_held"] == 2240 and a["metrics"]["leaked_tokens"] == 0
    assert b["metrics"] == {"peak_pages_held": 2, "peak_tokens_held": 32}
    assert fill_units({"key": "c", "config": {"page_size": "x"}, "metrics": {"peak_pages_held": 1}})["metrics"] == \
        {"peak_pages_held": 1}  # a foreign row keeps what it recorded
