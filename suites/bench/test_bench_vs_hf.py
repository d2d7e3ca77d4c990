"""kvbench's real-model path against Hugging Face `generate()`, side by side.

One float32 tiny Llama checkpoint saved by transformers (hidden 128, 3 layers, 4
heads, 2 KV heads, vocab 512), 32-token prompts, 64 greedy new tokens each, at
batch 1, 16 and 64. The kvbench side is the path of
`kvbench run --model DIR --prompts FILE --spec ... --page-size 16` (run_config,
audit at its default); the HF side is plain `generate()` on the same prompts.

The two run interleaved, REPEATS times each, so both see the same machine load;
the figures are medians and the ratio is the median of the per-repeat ratios
(kvbench with the audit at its default; the same run with --audit off is reported
beside it, to tell the model path's cost from the audit's).
HF runs at kvbench's thread count and at torch's default, and the ratio is taken
against the faster of the two. Output tok/s, the ratio and the equal-output counts
go to extra_info and are printed (-s). No time is asserted; greedy outputs must
equal HF's token for token, for plain decoding and for every algorithm (greedy
speculative decoding is lossless: K11 against HF's own generate()). `cpu_kernels`
says whether kvbench's compiled CPU kernels ran (plain decode's layers, and the
attention of verify and the drafters: model/cpu_kernels.py; set
KVBENCH_CPU_KERNELS=0 to measure the pure-torch path).

    python -m pytest -n 0 suites/bench/test_bench_vs_hf.py -s
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import time

import numpy as np
import pytest
import torch

pytestmark = [pytest.mark.bench, pytest.mark.slow]
transformers = pytest.importorskip("transformers", reason="HF generate() is the baseline: pip install kvbench[test]")

from harness.run.runner import run_config  # noqa: E402
from mini_engine.model import cpu_kernels  # noqa: E402

ALGOS = {
    "plain": dict(spec="none"),
    "eagle-chain": dict(spec="eagle", topk=1, steps=3),
    "eagle-tree": dict(spec="eagle", topk=4, steps=3, num_draft_tokens=8),
    "dflash": dict(spec="dflash", block_size=4),
}
BATCHES = (1, 16, 64)
PROMPT, NEW, VOCAB = 32, 64, 512
REPEATS = int(os.environ.get("KVBENCH_VS_HF_REPEATS", "5"))
# torch's own count: suites/conftest.py lowers it to one for the tests and notes it first.
DEFAULT_THREADS = int(os.environ.get("KVBENCH_DEFAULT_THREADS", torch.get_num_threads()))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """The checkpoint (saved by transformers) and one prompts file per batch size."""
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        tie_word_embeddings=False)
    root = tmp_path_factory.mktemp("vs-hf")
    transformers.LlamaForCausalLM(cfg).to(torch.float32).save_pretrained(root / "ckpt")
    prompts = np.random.default_rng(0).integers(0, VOCAB, (max(BATCHES), PROMPT)).tolist()
    files = {}
    for b in BATCHES:
        files[b] = root / f"prompts-{b}.jsonl"
        files[b].write_text("".join(json.dumps({"prompt": p, "max_new_tokens": NEW}) + "\n" for p in prompts[:b]))
    return root / "ckpt", prompts, files


@pytest.fixture(scope="module")
def hf_model(checkpoint):
    model = transformers.LlamaForCausalLM.from_pretrained(checkpoint[0]).to(torch.float32).eval()
    model.generation_config.eos_token_id = None  # kvbench never stops early: neither may HF
    return model


def hf_generate(model, prompts: list[list[int]], threads: int) -> tuple[float, list[list[int]]]:
    """(output tok/s, new tokens per prompt) of one greedy generate() call."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        ids = torch.tensor(prompts)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, do_sample=False,
                                 pad_token_id=0)
        wall = time.perf_counter() - t0
    finally:
        torch.set_num_threads(before)
    return out[:, PROMPT:].numel() / wall, out[:, PROMPT:].tolist()


def kvbench_run(ckpt, prompts_file, algo: str, **extra) -> tuple[float, list[list[int]], float]:
    """(reported output tok/s, outputs in prompt order, tau) of the `kvbench run` path."""
    row = run_config({"model": str(ckpt), "prompts": str(prompts_file), "page_size": 16, **ALGOS[algo], **extra},
                     outputs=True)
    # An engine and its scheduler reference each other: collect the cycle now, or every
    # run's KV pools (hundreds of MB at the default pool size) wait for a full GC.
    gc.collect()
    assert row["status"] == "ok", row["error"]
    m = row["metrics"]
    assert m["leaked_pages"] == 0 and m["violations"] == 0
    outs = sorted(row["outputs"], key=lambda o: o["rid"])
    return m["output_tokens_per_s"], [o["output"] for o in outs], m["tau"]


@pytest.mark.parametrize("algo", list(ALGOS))
@pytest.mark.parametrize("batch", BATCHES)
def test_vs_hf_generate(benchmark, checkpoint, hf_model, batch, algo):
    ckpt, prompts, files = checkpoint
    prompts = prompts[:batch]
    # With timing off (--benchmark-disable, CI's benchmark step) only the outputs are
    # checked: one repeat, no warm-up, HF at one thread count (its greedy outputs do not
    # depend on the count); the audit-off run stays, for its own leak and violation check.
    timed = not benchmark.disabled
    thread_counts = sorted({1, DEFAULT_THREADS}) if timed else [1]
    repeats = REPEATS if timed else 1
    kv_tps, off_tps, hf_tps, ratios = [], [], {t: [] for t in thread_counts}, []
    results: dict = {}

    def interleaved():
        if timed:
            kvbench_run(ckpt, files[batch], algo)  # warm-up: lazy imports, first-call allocations
            for t in thread_counts:
                hf_generate(hf_model, prompts, t)
        for _ in range(repeats):
            tps, results["kv"], results["tau"] = kvbench_run(ckpt, files[batch], algo)
            kv_tps.append(tps)
            # The same run without the per-step audit: the model path's own speed.
            off_tps.append(kvbench_run(ckpt, files[batch], algo, audit="off")[0])
            best = 0.0
            for t in thread_counts:
                h, results["hf"] = hf_generate(hf_model, prompts, t)
                hf_tps[t].append(h)
                best = max(best, h)
            ratios.append(tps / best)

    benchmark.pedantic(interleaved, rounds=1, iterations=1)
    kv_out, hf_out = results["kv"], results["hf"]
    equal = sum(a == b for a, b in zip(kv_out, hf_out))
    info = {
        "kvbench_tok_s": round(statistics.median(kv_tps), 1),
        "kvbench_audit_off_tok_s": round(statistics.median(off_tps), 1),
        **{f"hf_tok_s_{t}_threads": round(statistics.median(v), 1) for t, v in hf_tps.items()},
        "ratio": round(statistics.median(ratios), 3),
        "ratios": [round(r, 3) for r in ratios],
        "equal_outputs": equal, "requests": batch, "repeats": repeats, "tau": round(results["tau"], 3),
        "kvbench_threads": torch.get_num_threads(),
        "cpu_kernels": cpu_kernels.ops() is not None,
    }
    benchmark.extra_info.update(info)
    print(f"\n[vs-hf] batch={batch} algo={algo} " + " ".join(f"{k}={v}" for k, v in info.items()))
    assert equal == batch, f"{algo}: {batch - equal} of {batch} greedy outputs differ from HF generate()"
