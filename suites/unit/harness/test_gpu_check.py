"""The GPU check's plumbing on the CPU: ci/gpu-check.sh --dry-run end to end (tiny shapes),
the commands its subprocess steps run, the roofline table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.gpu import check as gpu_check
from harness.gpu.perf import peak_bandwidth
from harness.grid.suites import load_suite
from harness.grid.sweep import filter_selects

ROOT = Path(__file__).resolve().parents[3]


def test_dry_run_end_to_end(tmp_path):
    """The shell script, a fresh interpreter, the in-process steps; --peak-gbs gives the CPU a
    peak so the roofline arithmetic runs too."""
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), PYTHON=sys.executable)
    proc = subprocess.run(["bash", str(ROOT / "ci" / "gpu-check.sh"), "--dry-run", "--only", "k11,decode,kernel",
                           "--peak-gbs", "20"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ok"] and summary["dry_run"] and list(summary["steps"]) == ["k11", "decode", "kernel"]
    assert summary["machine"]["peak_bytes_per_s"] == 20e9 and summary["machine"]["peak_source"] == "--peak-gbs"
    k11 = summary["steps"]["k11"]["result"]["checks"]
    assert [c["algo"] for c in k11] == ["eagle-chain", "eagle-tree", "dflash"]
    assert all(c["lossless"] and c["requests_equal"] == c["requests"] == 2 for c in k11)
    runs = summary["steps"]["decode"]["result"]["runs"]
    assert [(r["batch"], r["algo"]) for r in runs] == [(b, a) for b in (1, 2) for a in
                                                       ("plain", "eagle-chain", "eagle-tree", "dflash")]
    for r in runs:
        assert r["verdict"] == "ok" and r["decode_steps"] >= 1 and r["decode_tokens_per_s"] > 0
        assert r["roofline_fraction"] == pytest.approx(r["achieved_bytes_per_s"] / 20e9)
        # Every plain step reads the weights and one more token of KV per request than the last.
        if r["algo"] == "plain":
            assert r["decode_steps"] == 3  # output 4: the first token comes from prefill
    plain = runs[0]
    # tiny in float32: 4 layers x K,V x 2 heads x 16 x 4 bytes = 1024 bytes of KV per token;
    # weights 4*(64*64*2 + 64*32*2 + 3*64*128) + 2*1024*64 = 278,528 params * 4 bytes. The three
    # decode steps of a 16-token prompt read contexts of 17, 18 and 19 tokens.
    assert plain["bytes_read_per_step"] == 1_114_112 + 1024 * (17 + 18 + 19) / 3
    kernels = summary["steps"]["kernel"]["result"]["runs"]
    assert [k["batch"] for k in kernels] == [1, 2] and all(k["max_abs_diff"] < 1e-4 for k in kernels)
    assert kernels[1]["kv_bytes"] == 2 * 2 * 32 * 2 * 16 * 4  # K,V x batch x ctx x KV heads x dim x float32


def test_bad_input_is_one_line(tmp_path, capsys):
    assert gpu_check.main(["--only", "decode,gpu", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--only takes steps from pytest, nightly, k11, decode, kernel" in err
    assert gpu_check.main(["--dry-run", "--peak-gbs", "0", "--out", str(tmp_path)]) == 2


def test_without_a_gpu_it_asks_for_dry_run(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this test is about a machine without a GPU")
    assert gpu_check.main(["--out", str(tmp_path)]) == 2
    assert "pass --dry-run" in capsys.readouterr().err
    assert not (tmp_path / "summary.json").exists()


def test_subprocess_steps_run_the_readme_commands(tmp_path, monkeypatch):
    check = gpu_check.Check(tmp_path, gpu_check.GPU, dry_run=False, peak_bw=None)
    ran = []
    monkeypatch.setattr(check, "_run", lambda name, cmd, env: ran.append((name, cmd, env)) or 0)
    monkeypatch.setattr(gpu_check, "has", lambda m: m not in ("mlflow", "pytest_benchmark"))
    status, result = check.pytest()
    name, cmd, env = ran[0]
    assert cmd[1:5] == ["-m", "pytest", "suites/gpu", "-m"] and cmd[5] == "gpu and not bench"  # no benchmark fixture
    assert f"--junitxml={tmp_path / 'pytest-gpu.xml'}" in cmd and env["PYTHONPATH"].split(os.pathsep)[0] == str(ROOT)
    assert "CUDA_VISIBLE_DEVICES" not in env or env["CUDA_VISIBLE_DEVICES"] == os.environ.get("CUDA_VISIBLE_DEVICES")
    status, result = check.nightly()
    name, cmd, env = ran[1]
    assert cmd[1:5] == ["-m", "harness.cli", "sweep", "nightly-gpu"] and cmd[-1] == "--no-mlflow"
    assert env["KVBENCH_RESULTS"] == str(tmp_path / "results")
    assert status == "failed" and result["configs"] == []  # nothing ran: no results to read


def test_nightly_is_skipped_naming_the_harness_extra_without_pydantic(tmp_path, monkeypatch):
    # A GPU machine with torch, triton and pytest but not the harness extra: the sweep
    # would stop with rc 2 before it started; the step says why instead of failing.
    check = gpu_check.Check(tmp_path, gpu_check.GPU, dry_run=False, peak_bw=None)
    monkeypatch.setattr(check, "_run", lambda *a: pytest.fail("the sweep must not start"))
    monkeypatch.setattr(gpu_check.roles, "installed", lambda m: m != "pydantic")
    status, result = check.nightly()
    assert status == "skipped"
    assert result["reason"] == ("kvbench sweep needs the harness extra (pydantic not installed): "
                                "pip install -e '.[harness]'")


@pytest.mark.parametrize("plan, want", [
    (gpu_check.GPU, ["model:qwen3-0.6b-spec:dflash-bs:16-ps:16", "model:qwen3-0.6b-spec:eagle-topk:1-steps:3-ps:16"]),
    (gpu_check.DRY, ["spec:dflash-bs:16-profile:sglang-0.5.23-ps:16-window:none"]),
])
def test_the_sweep_slice_selects_what_it_says(plan, want):
    suite = load_suite(plan.suite, validate=False)
    selects = filter_selects(plan.suite_filter)
    assert [c.id for c in suite.configs if selects(c.id)] == want


@pytest.mark.parametrize("name, gbs", [
    ("NVIDIA H200", 4800), ("NVIDIA H200 NVL", 4800), ("NVIDIA H100 80GB HBM3", 3350), ("NVIDIA H100 PCIe", 2000),
    ("NVIDIA H100 NVL", 3900), ("NVIDIA GeForce RTX 5090", 1792), ("NVIDIA A100-SXM4-80GB", 2039),
    ("NVIDIA A100-PCIE-40GB", 1555), ("Tesla T4", None), (None, None),
])
def test_peak_bandwidth_table(name, gbs):
    got = peak_bandwidth(name)
    assert (got and round(got / 1e9)) == gbs
