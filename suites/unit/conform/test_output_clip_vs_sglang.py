"""The clip of a request's output at arrival (mini_engine/config/pools.py ``output_cap``)
against the installed SGLang's own ``Scheduler.init_req_max_new_tokens``, compiled from its
source: 0.5.23 asks the allocator (``BaseTokenToKVPoolAllocator.max_new_tokens_for_memory``,
which the SWA allocator inherits), 0.5.18 writes the same bound inline. Release-neutral:
CI runs it under both.

The scheduler's other bound, ``max_req_len - input_len - 1``, is left out on both sides:
kvbench refuses a request longer than max_context as bad input instead.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.errors import ConfigError
from mini_engine.config.pools import output_cap
from mini_engine.request import Request
from sglang_source import methods


@pytest.fixture(scope="module")
def init_req_max_new_tokens(sg):  # sg: the installed SGLang, or a skip
    ns = {"logger": logging.getLogger("sglang-clip"),
          "get_parallel": lambda: SimpleNamespace(attn_dcp_size=1)}
    methods("sglang.srt.managers.scheduler", "Scheduler", {"init_req_max_new_tokens"}, ns)
    base = {}
    if sg.version != "0.5.18":
        methods("sglang.srt.mem_cache.allocator.base", "BaseTokenToKVPoolAllocator",
                {"max_new_tokens_for_memory"}, base)

    def clip(prompt_len: int, max_new: int, pool_tokens: int, ps: int) -> int:
        alloc = SimpleNamespace(page_size=ps)
        if base:
            alloc.max_new_tokens_for_memory = lambda *a, **k: base["max_new_tokens_for_memory"](alloc, *a, **k)
        sched = SimpleNamespace(max_new_tokens_limit=None, max_req_len=1 << 30, page_size=ps,
                                max_total_num_tokens=pool_tokens, kv_shard_widening=1,
                                token_to_kv_pool_allocator=alloc, sliding_window_size=None,
                                chunked_prefill_size=8192)
        req = SimpleNamespace(rid=0, origin_input_ids=[0] * prompt_len,
                              sampling_params=SimpleNamespace(max_new_tokens=max_new, min_new_tokens=0),
                              set_finish_with_abort=lambda why: pytest.fail(f"SGLang aborted: {why}"))
        ns["init_req_max_new_tokens"](sched, req)
        return req.sampling_params.max_new_tokens

    return clip


def test_output_cap_is_sglangs(init_req_max_new_tokens):
    for ps in (1, 16, 64):
        for pool in (64, 256, 1000, 4096):
            for prompt in (1, 15, 16, 17, 100, 250):
                for max_new in (1, 8, 100, 900, 5000):
                    assert output_cap(prompt, max_new, pool, ps) == init_req_max_new_tokens(prompt, max_new, pool, ps), \
                        (prompt, max_new, pool, ps)


def _engine(pool: int, admission: str = "sglang") -> Engine:
    return Engine(EngineConfig(spec="none", page_size=16, pool_tokens=pool, max_context=512,
                               admission=admission, chunked_prefill=64))


def test_a_request_at_the_pools_edge_is_clipped_as_sglang_clips_it():
    # ps 16, a 64-token pool: a 17-token prompt page-ceils to 32, so SGLang keeps 64 - 32 - 17 = 15
    # of the 30 outputs asked for; kvbench's own admission (estimate) runs all 30.
    reqs = [Request(rid=0, prompt=list(range(17)), max_new_tokens=30)]
    engine = _engine(64)
    res = engine.run(reqs)
    assert res.verdict == "ok" and len(reqs[0].outputs) == 15
    assert engine.stats.clipped_requests == 1 and engine.stats.clipped_output_tokens == 15
    assert output_cap(17, 30, 64, 16) == 15
    reqs = [Request(rid=0, prompt=list(range(17)), max_new_tokens=30)]
    engine = _engine(64, admission="estimate")
    engine.run(reqs)
    assert engine.stats.clipped_requests == 0


def test_a_request_the_pool_holds_only_clipped_runs_clipped():
    # Asking 40 outputs of a 17-token prompt in 64 tokens: whole, it needs 4 pages and a page
    # of stranding room; SGLang clips it to 15 and runs it, and so does kvbench under its rules.
    reqs = [Request(rid=0, prompt=list(range(17)), max_new_tokens=40)]
    engine = _engine(64)
    assert engine.run(reqs).verdict == "ok" and len(reqs[0].outputs) == 15
    with pytest.raises(ConfigError, match="too small for one request"):
        _engine(64, admission="estimate").run([Request(rid=0, prompt=list(range(17)), max_new_tokens=40)])


def test_a_clip_to_no_output_is_refused_in_one_line():
    # A 31-token prompt in a 48-token pool: 48 - 32 - 17 < 0, SGLang would prefill it and emit
    # nothing (a prefill-only request); kvbench counts only requests that emit a token.
    with pytest.raises(ConfigError) as err:
        _engine(48).run([Request(rid=3, prompt=list(range(31)), max_new_tokens=1)])
    assert str(err.value).count("\n") == 0
    assert "request 3" in str(err.value) and "pool_tokens to >= 64" in str(err.value)
