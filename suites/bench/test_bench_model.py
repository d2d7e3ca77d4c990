"""Real-model throughput on a CPU: the tiny model at batch 1, 16 and 64, plain decoding
and each speculative algorithm (drafter: every target layer shared, noise 0.1).

Figures (output tokens/s, tau, decode steps) go to extra_info; only deterministic
counters are asserted (all requests finish, no leak, no violation, and K11: the
speculative outputs equal plain greedy decoding's at the same batch).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.model.backend import ModelBackend
from mini_engine.request import Request

pytestmark = [pytest.mark.bench, pytest.mark.slow, pytest.mark.benchmark(group="model")]

ALGOS = {
    "plain": dict(),
    "eagle-chain": dict(spec="eagle", topk=1, steps=3),
    "eagle-tree": dict(spec="eagle", topk=4, steps=3, num_draft_tokens=8),
    "dflash": dict(spec="dflash", block_size=4),
}
INPUT, OUTPUT = 32, 32
_plain_outputs: dict[int, dict] = {}


def workload(batch: int) -> list[Request]:
    rng = np.random.default_rng(batch)
    return [Request(rid=i, prompt=rng.integers(0, 1024, INPUT).tolist(), max_new_tokens=OUTPUT) for i in range(batch)]


@pytest.fixture(autouse=True)
def one_thread():
    # A tiny model's matmuls are microseconds: intra-op threads only add handoff cost.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("algo", list(ALGOS))
@pytest.mark.parametrize("batch", [1, 16, 64])
def test_model_throughput(benchmark, bench_mean, batch, algo):
    cfg = EngineConfig(model="tiny", page_size=16, pool_tokens=batch * 512 + 4096, max_context=256,
                       max_running=batch, seed=0, **ALGOS[algo])

    def once():
        return Engine(cfg, backend=ModelBackend(cfg)).run(workload(batch))

    result = benchmark.pedantic(once, rounds=3, iterations=1, warmup_rounds=1)
    s = result.stats
    assert result.verdict == "ok" and s["finished_requests"] == batch
    assert s["leaked_pages"] == 0 and s["violations"] == 0
    if algo == "plain":
        _plain_outputs[batch] = result.outputs
    elif batch in _plain_outputs:
        same = sum(result.outputs[r] == _plain_outputs[batch][r] for r in result.outputs)
        benchmark.extra_info["k11_equal_requests"] = same  # float32: a near-tie may flip one
    mean = bench_mean()
    if mean is None:
        return
    benchmark.extra_info.update(
        output_tokens_per_s=s["output_tokens"] / mean, tau=s["tau"], decode_steps=s["decode_steps"],
        threads=torch.get_num_threads(),
    )
