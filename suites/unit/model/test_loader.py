"""Local checkpoints: a round trip, and every bad directory is one line naming the problem."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace

import pytest
import torch

from harness.cli import main
from mini_engine.config.engine_config import EngineConfig
from mini_engine.errors import KVBenchError
from mini_engine.model.backend import ModelBackend
from mini_engine.config.shapes import named_shape
from mini_engine.config.hf_config import CheckpointError
from mini_engine.model.loader import load_checkpoint, resolve_model, save_checkpoint
from mini_engine.model.transformer import Transformer


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_round_trip_gives_the_same_model(arch, tmp_path):
    cfg = replace(named_shape("tiny"), architecture=arch, qk_norm=arch == "qwen3",
                  tie_embeddings=arch == "qwen3", seed=3)
    model = Transformer(cfg)
    save_checkpoint(model, cfg, tmp_path / "m")
    mcfg, weights = load_checkpoint(tmp_path / "m")
    assert (mcfg.architecture, mcfg.qk_norm, mcfg.tie_embeddings) == (arch, arch == "qwen3", arch == "qwen3")
    loaded = Transformer(mcfg, init=False)
    weights.load_into(loaded)
    ids = torch.arange(20) * 7 % cfg.vocab_size
    torch.testing.assert_close(loaded.dense_forward(ids), model.dense_forward(ids), rtol=0, atol=0)


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def _edit_config(path, **changes):
    data = json.loads((path / "config.json").read_text())
    data.update(changes)
    (path / "config.json").write_text(json.dumps(data))


def test_missing_directory(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        resolve_model(str(tmp_path / "nope"))


def test_unknown_model_name():
    with pytest.raises(CheckpointError, match="model must be one of tiny"):
        resolve_model("tinyy")


def test_file_instead_of_directory(tmp_path):
    f = tmp_path / "weights.bin"
    f.write_bytes(b"x")
    with pytest.raises(CheckpointError, match="is not a directory"):
        resolve_model(str(f))


def test_missing_config(tiny_checkpoint, tmp_path):
    d = _copy(tiny_checkpoint, tmp_path / "c")
    (d / "config.json").unlink()
    with pytest.raises(CheckpointError, match="checkpoint config '.*config.json': not found"):
        resolve_model(str(d))


def test_bad_json(tiny_checkpoint, tmp_path):
    d = _copy(tiny_checkpoint, tmp_path / "c")
    (d / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        resolve_model(str(d))


def test_missing_weights(tiny_checkpoint, tmp_path):
    d = _copy(tiny_checkpoint, tmp_path / "c")
    (d / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="no \\*.safetensors"):
        resolve_model(str(d))


def test_unsupported_architecture(tiny_checkpoint, tmp_path):
    d = _copy(tiny_checkpoint, tmp_path / "c")
    _edit_config(d, architectures=["MistralForCausalLM"])
    with pytest.raises(CheckpointError, match="unsupported architecture.*MistralForCausalLM"):
        resolve_model(str(d))


def test_config_lacks_a_size(tiny_checkpoint, tmp_path):
    d = _copy(tiny_checkpoint, tmp_path / "c")
    _edit_config(d, hidden_size=None)
    with pytest.raises(CheckpointError, match="hidden_size"):
        resolve_model(str(d))


@pytest.mark.parametrize("change, needle", [
    (dict(num_key_value_heads=-2), "positive integer 'num_key_value_heads' \\(got -2\\)"),
    (dict(num_key_value_heads="2"), "positive integer 'num_key_value_heads'"),
    (dict(head_dim=0), "positive integer 'head_dim'"),
    (dict(num_hidden_layers=True), "positive integer 'num_hidden_layers'"),
    (dict(rope_theta="big"), "positive number 'rope_theta'"),
    (dict(rms_norm_eps=-1e-6), "positive number 'rms_norm_eps'"),
    (dict(tie_word_embeddings="yes"), "tie_word_embeddings must be true or false"),
])
def test_bad_config_values_are_one_line_errors(tiny_checkpoint, tmp_path, change, needle):
    d = _copy(tiny_checkpoint, tmp_path / "c")
    _edit_config(d, **change)
    with pytest.raises(CheckpointError, match=needle):
        resolve_model(str(d))


def test_optional_config_values_take_their_defaults(tiny_checkpoint, tmp_path):
    d = _copy(tiny_checkpoint, tmp_path / "c")
    _edit_config(d, rope_theta=None, rms_norm_eps=None, architectures="LlamaForCausalLM")
    mcfg, _ = resolve_model(str(d))
    assert (mcfg.rope_theta, mcfg.rms_eps, mcfg.architecture) == (10000.0, 1e-6, "llama")


def test_transformers_5_rope_parameters_are_read(tiny_checkpoint, tmp_path):
    d = _copy(tiny_checkpoint, tmp_path / "c")
    _edit_config(d, rope_theta=None, rope_parameters={"rope_theta": 50000.0, "rope_type": "llama3", "factor": 8.0,
                                                      "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                      "original_max_position_embeddings": 64})
    mcfg, _ = resolve_model(str(d))
    assert (mcfg.rope_theta, mcfg.rope_scaling) == (50000.0, (8.0, 1.0, 4.0, 64))
    _edit_config(d, rope_parameters={"full_attention": {"rope_theta": 1.0}})
    with pytest.raises(CheckpointError, match="rope_parameters must be one JSON object"):
        resolve_model(str(d))


@pytest.mark.parametrize("change, needle", [
    (dict(intermediate_size=96), r"mlp\.\w+_proj\.weight has shape \(\d+, \d+\), config.json implies"),
    (dict(num_hidden_layers=5), "missing parameter 'model.layers.4"),
    (dict(num_hidden_layers=3), "unexpected parameter 'model.layers.3"),
])
def test_mismatched_shapes(tiny_checkpoint, tmp_path, change, needle):
    d = _copy(tiny_checkpoint, tmp_path / "c")
    _edit_config(d, **change)
    mcfg, weights = resolve_model(str(d))
    with pytest.raises(CheckpointError, match=needle):
        weights.load_into(Transformer(mcfg, init=False))


def test_corrupt_weights(tiny_checkpoint, tmp_path):
    d = _copy(tiny_checkpoint, tmp_path / "c")
    (d / "model.safetensors").write_bytes(b"garbage")
    cfg = EngineConfig(model=str(d), pool_tokens=256)
    with pytest.raises(CheckpointError, match="not readable safetensors"):
        ModelBackend(cfg)


@pytest.mark.parametrize("damage, reason", [
    ("missing", "not found (a checkpoint directory holds config.json and *.safetensors weight files)"),
    ("directory", "a directory, not a regular file"),
    ("syntax", "not valid JSON: Expecting property name enclosed in double quotes (line 1)"),
    ("list", "must hold a JSON object"),
])
def test_a_bad_config_json_is_one_line_naming_the_file(tiny_checkpoint, tmp_path, damage, reason):
    d = _copy(tiny_checkpoint, tmp_path / "c")
    cfg = d / "config.json"
    cfg.unlink()
    if damage == "directory":
        cfg.mkdir()
    elif damage == "syntax":
        cfg.write_text("{not json")
    elif damage == "list":
        cfg.write_text("[1, 2]")
    with pytest.raises(CheckpointError) as err:
        resolve_model(str(d))
    assert str(err.value) == f"checkpoint config {str(cfg)!r}: {reason}"


def test_errors_are_one_line_kvbench_errors(tmp_path):
    with pytest.raises(KVBenchError) as err:
        resolve_model(str(tmp_path / "missing"))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("damage, needle", [
    ("absent", "does not exist"),
    ("no-config", "checkpoint config '.*config.json': not found"),
    ("no-weights", "has no \\*.safetensors weight files"),
    ("mistral", "unsupported architecture \\['MistralForCausalLM'\\]"),
    ("wider-mlp", "down_proj.weight has shape \\(64, 128\\), config.json implies \\(64, 96\\)"),
])
def test_cli_bad_checkpoint_is_exit_2_and_one_line(tiny_checkpoint, tmp_path, capsys, damage, needle):
    d = tmp_path / "absent"
    if damage != "absent":
        d = _copy(tiny_checkpoint, tmp_path / damage)
        if damage == "no-config":
            (d / "config.json").unlink()
        elif damage == "no-weights":
            (d / "model.safetensors").unlink()
        else:
            _edit_config(d, **(dict(architectures=["MistralForCausalLM"]) if damage == "mistral"
                              else dict(intermediate_size=96)))
    code = main(["run", "--model", str(d), "--num-requests", "2", "--input-len", "8", "--output-len", "4",
                 "--pool-tokens", "1024", "--prompt-vocab", "512"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and re.search(needle, err) and "Traceback" not in err


def test_prompt_outside_vocabulary_is_a_clear_error():
    from mini_engine.engine import Engine
    from mini_engine.request import Request

    cfg = EngineConfig(model="tiny", pool_tokens=1024)
    eng = Engine(cfg, backend=ModelBackend(cfg))
    with pytest.raises(KVBenchError, match="outside the model's vocabulary \\(vocab_size=1024\\)"):
        eng.run([Request(rid=0, prompt=[1, 5000], max_new_tokens=2)])


def test_llama3_rope_scaling_round_trip(tmp_path):
    """Llama 3.1's scaled RoPE survives export and load, and changes long-range positions."""
    cfg = replace(named_shape("tiny"), architecture="llama", qk_norm=False, rope_theta=500000.0,
                  rope_scaling=(8.0, 1.0, 4.0, 64))
    save_checkpoint(Transformer(cfg), cfg, tmp_path / "l31")
    mcfg, _ = load_checkpoint(tmp_path / "l31")
    assert mcfg.rope_scaling == (8.0, 1.0, 4.0, 64)
    from mini_engine.model.layers import rope_cos_sin

    pos = torch.arange(200)
    _, scaled = rope_cos_sin(pos, mcfg, torch.float64)
    _, plain = rope_cos_sin(pos, replace(mcfg, rope_scaling=None), torch.float64)
    assert torch.equal(scaled[:, 0], plain[:, 0])  # the highest frequency is kept
    torch.testing.assert_close(scaled[:, 7], plain[:, 7] / 8, rtol=1e-3, atol=0)  # the lowest is slowed 8x


def test_unsupported_rope_scaling(tiny_checkpoint, tmp_path):
    d = _copy(tiny_checkpoint, tmp_path / "c")
    _edit_config(d, rope_scaling={"rope_type": "yarn", "factor": 4.0})
    with pytest.raises(CheckpointError, match="rope_scaling type 'yarn' is not supported"):
        resolve_model(str(d))


def test_head_dim_the_triton_kernels_cannot_index(tmp_path):
    """A checkpoint whose head_dim is not a power of two runs on torch attention; asking for
    Triton (or the CUDA graphs that replay it) is a one-line error, not a kernel failure."""
    cfg = replace(named_shape("tiny"), architecture="llama", qk_norm=False, head_dim=12)
    path = save_checkpoint(Transformer(cfg), cfg, tmp_path / "hd12")
    ecfg = EngineConfig(model=str(path), pool_tokens=256)
    assert ModelBackend(ecfg).mcfg.head_dim == 12
    with pytest.raises(KVBenchError, match="attention=triton needs a power-of-two head_dim"):
        ModelBackend(ecfg, attention="triton")
    with pytest.raises(KVBenchError, match="CUDA graphs need a power-of-two head_dim"):
        ModelBackend(ecfg, cuda_graphs=True)


def test_cli_runs_a_checkpoint(tiny_checkpoint, capsys):
    code = main(["run", "--model", str(tiny_checkpoint), "--num-requests", "2", "--input-len", "8",
                 "--output-len", "4", "--pool-tokens", "1024", "--prompt-vocab", "512", "--spec", "eagle"])
    assert code == 0, capsys.readouterr().err


def test_synthetic_prompts_draw_from_the_checkpoint_vocabulary(tiny_checkpoint, capsys):
    from harness.core.run_spec import RunSpec

    wl = RunSpec.parse({"model": str(tiny_checkpoint)}).workload
    assert wl.prompt_vocab == 512  # the checkpoint's, not the accounting default of 1024
    wl = RunSpec.parse({"model": str(tiny_checkpoint), "prompt_vocab": 100}).workload
    assert wl.prompt_vocab == 100  # an explicit choice stands
    code = main(["run", "--model", str(tiny_checkpoint), "--num-requests", "3", "--input-len", "24",
                 "--output-len", "4", "--pool-tokens", "1024"])
    assert code == 0, capsys.readouterr().err
