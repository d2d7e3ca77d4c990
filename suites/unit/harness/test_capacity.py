"""How many requests fit per GPU, without a GPU (harness/run/capacity.py): worked examples.

Every number below is computed by hand from the shapes' configs (DESIGN.md's KV
formula) and the engine's pool formula, mem_fraction 0.9, context 4096 tokens:

qwen3-0.6b: weights 595,984,384 params (per layer 1024*2048*2 + 1024*1024*2 attention
+ 3*1024*3072 MLP = 15,728,640, x 28 = 440,401,920, + tied embedding 151936*1024 =
155,582,464) x 2 bytes = 1,191,968,768; KV 28 * 8 * 128 * 2 bytes * 2 = 114,688 a token.
llama-3.1-8b: 8,029,995,008 params (per layer 4096*4096*2 + 4096*1024*2 + 3*4096*14336
= 218,103,808, x 32, + 2 * 128256*4096) x 2 = 16,059,990,016; KV 32*8*128*2*2 = 131,072.
"""

from __future__ import annotations

import re

import pytest

from harness.core.errors import UsageError
from harness.core.run_spec import RunSpec
from harness.run.capacity import GiB, capacity, for_run, grid, gpus_of
from mini_engine.errors import ConfigError

# (model, gpu) -> (pool tokens, pages at ps 16, requests of 4096 tokens)
WORKED = {
    # 32 GiB * 0.9 = 30,923,764,531 bytes; - weights = 29,731,795,763; // 114,688 = 259,240
    # tokens; // 16 = 16,202 pages; a request: ceil(4096 / 16) + 1 = 257 pages (plain decode
    # records exact extents in sglang-0.5.23: one page more); 16,202 // 257 = 63.
    ("qwen3-0.6b", "rtx5090"): (259240, 16202, 63),
    # 80 GiB * 0.9 = 77,309,411,328; - weights = 76,117,442,560; // 114,688 = 663,691; 41,480 pages; // 257 = 161
    ("qwen3-0.6b", "h100"): (663691, 41480, 161),
    # 141 GiB * 0.9 = 136,257,837,465; - weights = 135,065,868,697; // 114,688 = 1,177,680; 73,605; // 257 = 286
    ("qwen3-0.6b", "h200"): (1177680, 73605, 286),
    # 30,923,764,531 - 16,059,990,016 = 14,863,774,515; // 131,072 = 113,401; 7,087 pages; // 257 = 27
    ("llama-3.1-8b", "rtx5090"): (113401, 7087, 27),
    # 77,309,411,328 - 16,059,990,016 = 61,249,421,312; // 131,072 = 467,296; 29,206; // 257 = 113
    ("llama-3.1-8b", "h100"): (467296, 29206, 113),
    # 136,257,837,465 - 16,059,990,016 = 120,197,847,449; // 131,072 = 917,036; 57,314; // 257 = 223
    ("llama-3.1-8b", "h200"): (917036, 57314, 223),
}


@pytest.mark.parametrize("model,gpu", list(WORKED))
def test_two_shapes_on_the_three_gpus_match_the_hand_computed_examples(model, gpu):
    c = capacity({"model": model}, 4096, gpu)
    assert (c.pool_tokens, c.pages, c.requests) == WORKED[(model, gpu)]
    assert c.request_pages == 257
    assert c.weight_bytes == {"qwen3-0.6b": 1_191_968_768, "llama-3.1-8b": 16_059_990_016}[model]
    assert c.kv_bytes_per_token == {"qwen3-0.6b": 114_688, "llama-3.1-8b": 131_072}[model]


def test_capacity_moves_with_page_size_profile_window_and_block_size():
    h100 = {"h100": 80 * GiB}
    by_ps = grid({"model": "qwen3-0.6b"}, 4096, h100)
    # ps 1: 663,691 pages, 4097 a request -> 161; ps 64: 10,370 pages, 65 a request -> 159
    assert [(c.page_size, c.request_pages, c.requests) for c in by_ps] == [(1, 4097, 161), (16, 257, 161),
                                                                          (64, 65, 159)]
    # host-aligned page-ceils every writer: nothing strands, no page more: 41,480 // 256 = 162
    assert capacity({"model": "qwen3-0.6b", "profile": "host-aligned"}, 4096, "h100").requests == 162
    # sliding layers: admission counts the smaller SWA pool, int(41,480 * 0.8) = 33,184 -> // 257 = 129
    swa = capacity({"model": "qwen3-0.6b", "window": 1024, "layer_pattern": "3:1"}, 4096, "h100")
    assert (swa.admission_pages, swa.requests) == (33184, 129)
    # DFLASH: the drafter's weights and KV take room, and a request reserves 2 * block_size more
    small, big = (capacity({"model": "qwen3-0.6b", "spec": "dflash", "block_size": bs}, 4096, "h100") for bs in (4, 64))
    assert small.pool_tokens == big.pool_tokens < 663691
    assert (small.request_pages, big.request_pages) == (-(-(4096 + 8) // 16) + 1, -(-(4096 + 128) // 16) + 1)
    assert small.requests > big.requests


def test_a_custom_gpu_and_bad_input_are_one_line():
    assert list(gpus_of(48)) == ["rtx5090", "h100", "h200", "48 GiB"] and gpus_of(48)["48 GiB"] == 48 * GiB
    with pytest.raises(UsageError, match="needs a model shape"):
        capacity({"model": "none"}, 4096, "h100")
    with pytest.raises(UsageError, match="gpu must be one of rtx5090, h100, h200"):
        capacity({"model": "tiny"}, 4096, "a100")
    with pytest.raises(ConfigError, match=r"--gpu-mem \(GiB\) must be a number in \[0.01, 16384.0\] \(got 0\)"):
        gpus_of(0)


def test_kvbench_run_prints_the_table_for_its_own_lengths(cli, capsys):
    title, heads, rows = for_run(RunSpec.parse({"num_requests": 2, "input_len": 3000, "output_len": 1096}),
                                 "qwen3-0.6b", None)
    assert "requests of 4096 tokens" in title and heads == ["requests that fit", "rtx5090", "h100", "h200"]
    assert rows[0] == ["KV pool, tokens", "259,240", "663,691", "1,177,680"]
    assert rows[2] == ["ps 16: 257 pages/req", "63", "161", "286"]
    assert cli("run", "--num-requests", "2", "--input-len", "64", "--output-len", "8", "--capacity", "llama-3.1-8b",
               "--gpu-mem", "24") == 0
    out = capsys.readouterr().out
    assert "requests that fit" in out and "24 GiB" in out
    # model none counts token slots; the shape --capacity names gives them bytes on the same screen
    from harness.core.kv_shape import named

    held = int(re.search(r"peak held: token slots \(pages\)\s*│\s*(\d+)", out).group(1))
    mib = held * named("llama-3.1-8b").full_bytes / 2**20
    assert f"{mib:,.2f} MiB (in llama-3.1-8b's shape" in " ".join(out.split()), out
    assert cli("run", "--num-requests", "2", "--gpu-mem", "24") == 2
    assert "--gpu-mem goes with --capacity" in capsys.readouterr().err


def test_the_report_sizes_each_config_that_names_a_shape():
    from harness.view.capacity_report import capacity_rows, capacity_section

    cfg = {"model": "qwen3-0.6b", "spec": "none", "page_size": 16, "profile": "sglang-0.5.23",
           "input_len": 3000, "output_len": 1096}
    rows = [{"config": cfg, "status": "ok"}, {"config": {**cfg}, "status": "ok"},  # the same config twice: once
            {"config": {**cfg, "model": "none"}, "status": "ok"}]  # no shape: left out
    found = capacity_rows(rows)
    assert found == [("model=qwen3-0.6b spec=none profile=sglang-0.5.23 page_size=16", 4096, [63, 161, 286])]
    html = capacity_section(rows)
    assert "<td>63</td><td>161</td><td>286</td>" in html and "<th>H200</th>" in html
    assert "names a model shape" in capacity_section(rows[2:])
