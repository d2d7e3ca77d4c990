"""`kvbench run --capacity` on numbers no GPU or checkpoint has: one line naming the
bound, exit 2, never a traceback (R5: OverflowError, MemoryError) nor a table sized
from nonsense (R8: 10^30-scale request counts, an unknown dtype sized as float32)."""

from __future__ import annotations

import json

import pytest

from test_faults_trust import cli

BASE = {"architectures": ["LlamaForCausalLM"], "vocab_size": 32000, "hidden_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 512, "torch_dtype": "bfloat16"}


@pytest.mark.parametrize("gib", ["inf", "1e308", "nan", "1e30", "0", "-8"])
def test_gpu_mem_out_of_bounds_is_one_line(tmp_path, capsys, monkeypatch, gib):
    monkeypatch.setenv("KVBENCH_RESULTS", str(tmp_path / "results"))
    code, out, err = cli(["run", "--num-requests", "2", "--capacity", "llama-3.1-8b", "--gpu-mem", gib], capsys)
    assert code == 2 and not out and len(err) == 1, (out, err)
    assert "--gpu-mem (GiB) must be a number in [0.01, 16384.0]" in err[0]


@pytest.mark.parametrize("change, says", [
    ({"num_hidden_layers": 10**12}, "'num_hidden_layers' must be at most 2147483647 (got one of 13 digits)"),
    ({"num_hidden_layers": 10**6}, "'num_hidden_layers' must be at most 4096 (got 1000000)"),
    ({"vocab_size": int("9" * 500)}, "'vocab_size' must be at most 2147483647 (got one of 500 digits)"),
    ({"torch_dtype": "float128"}, "'torch_dtype' must be one of float32, float64, bfloat16, float16 (got 'float128')"),
    ({"dtype": "int4"}, "'dtype' must be one of float32, float64, bfloat16, float16 (got 'int4')"),
])
def test_a_checkpoint_config_out_of_bounds_is_one_line(tmp_path, capsys, monkeypatch, change, says):
    monkeypatch.setenv("KVBENCH_RESULTS", str(tmp_path / "results"))
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({**BASE, **change}))
    code, out, err = cli(["run", "--num-requests", "2", "--capacity", ckpt], capsys)
    assert code == 2 and not out and len(err) == 1, (out, err)
    assert says in err[0]


def test_a_checkpoint_in_bounds_still_sizes(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KVBENCH_RESULTS", str(tmp_path / "results"))
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps(BASE))
    code, out, err = cli(["run", "--num-requests", "2", "--capacity", ckpt, "--gpu-mem", "24"], capsys)
    assert code == 0 and "24 GiB" in out, err
