"""A PD arrival's match against the decode side's radix tree (pd_radix), on worked numbers.

SGLang's DecodePreallocQueue matches each arrival's prompt against the decode tree
(_match_prefix_and_lock), locks the hit and preallocates only the pages past it
(_required_alloc_tokens, alloc_for_decode_prealloc); the transfer then sends the rest,
and the prompt goes into the tree before the request decodes (process_prebuilt).
0.5.23 stops the match below the SWA tail and keeps the tail path after a hit; 0.5.18
matches the whole prompt and, after a hit, allocates both pools past it in full.
The budget side of the same match is checked against SGLang's own methods by
suites/unit/conform/test_pd_budget_vs_sglang.py; the tree calls by kvbench conform.
"""

from __future__ import annotations

import pytest

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.request import Request

PS = 16


def arrivals(engine: Engine, reqs: list[Request]) -> dict:
    """Run the engine; for each request, (its hit, full pages, SWA pages) its prealloc took."""
    engine.submit(reqs)
    seen: dict = {}
    m = engine.manager
    swa = (lambda: m.swa.allocator.num_free_pages) if m.swa is not None else (lambda: 0)  # noqa: E731
    prealloc = m.pd_prealloc

    def measured(state, fill_len):
        hit, free, swa_free = state.protected, m.num_free_pages, swa()
        ok = prealloc(state, fill_len)
        seen[state.rid] = (hit, free - m.num_free_pages, swa_free - swa())
        return ok

    m.pd_prealloc = measured
    res = engine.run()
    assert res.verdict == "ok", res.error
    assert res.stats["violations"] == 0 and res.stats["leaked_pages"] == 0
    return seen


@pytest.mark.parametrize("profile", ["sglang-0.5.23", "sglang-pre-35265"])
def test_a_repeated_prompt_preallocates_only_past_the_hit(profile):
    # Request 0 (100 prompt tokens, 4 outputs) finishes: the tree keeps its page-aligned 96
    # committed tokens (prompt + 3 outputs = 103). Request 1, the same prompt, matches 96 of
    # its 100 tokens and takes ceil_16(100) - 96 = 16 tokens: one page, not seven.
    cfg = EngineConfig(spec="none", page_size=PS, pool_tokens=2048, reserved_decode_tokens=0, pd_radix=True,
                       profile=profile, audit="raise")
    prompt = list(range(1, 101))
    seen = arrivals(Engine(cfg), [Request(rid=0, prompt=prompt, max_new_tokens=4, fill_len=100),
                                  Request(rid=1, prompt=prompt, max_new_tokens=4, fill_len=100, arrival_step=10)])
    assert seen[0] == (0, 7, 0)
    assert seen[1] == (96, 1, 0)


def test_without_pd_radix_a_repeated_prompt_matches_nothing():
    cfg = EngineConfig(spec="none", page_size=PS, pool_tokens=2048, reserved_decode_tokens=0, audit="raise")
    prompt = list(range(1, 101))
    seen = arrivals(Engine(cfg), [Request(rid=0, prompt=prompt, max_new_tokens=4, fill_len=100),
                                  Request(rid=1, prompt=prompt, max_new_tokens=4, fill_len=100, arrival_step=10)])
    assert seen[1] == (0, 7, 0)


def swa_turns(profile: str) -> dict:
    # Window 32, ps 16. Request 0: a 200-token prompt, 4 outputs; its SWA tail starts at
    # floor_16(199 - 32) = 160 (0.5.23's decode-radix rule; 0.5.18's floor_16(200 - 32) is
    # 160 too), so the tree's key (page-floored to 192) has live SWA over [160, 192) and a
    # match may end at 192. Request 1 continues it: the same 200 tokens and 100 more.
    cfg = EngineConfig(spec="none", page_size=PS, pool_tokens=4096, reserved_decode_tokens=0, pd_radix=True,
                       window=32, layer_pattern="1:1", profile=profile, audit="raise")
    first = list(range(1, 201))
    return arrivals(Engine(cfg), [Request(rid=0, prompt=first, max_new_tokens=4, fill_len=200),
                                  Request(rid=1, prompt=first + list(range(500, 600)), max_new_tokens=4,
                                          fill_len=300, arrival_step=10)])


def test_0523_matches_below_the_swa_tail_and_keeps_the_tail_path():
    seen = swa_turns("sglang-0.5.23")
    # Request 0: 13 full pages; SWA for [160, 208): 3 pages.
    assert seen[0] == (0, 13, 3)
    # Request 1: its tail starts at floor_16(299 - 32) = 256, so the key stops at 256 tokens;
    # the tree holds 192 of them with live SWA at the end: the hit is 192. Full pages past
    # it: ceil_16(300) - 192 = 112 tokens, 7 pages; SWA: only the 44-token tail, 3 pages.
    assert seen[1] == (192, 7, 3)


def test_0518_matches_the_whole_prompt_and_allocates_both_pools_past_the_hit():
    seen = swa_turns("sglang-pre-35265")
    assert seen[0] == (0, 13, 3)
    # 0.5.18 looks up all 300 tokens; the tree's key is 192 tokens long (the 203 committed,
    # page-floored), so the hit is 192 again. With a hit 0.5.18 leaves the tail path
    # (uses_swa_tail and prefix_len == 0): both pools get [192, 300), 7 pages each.
    assert seen[1] == (192, 7, 7)


def test_a_page_aligned_repeat_is_all_hit_and_allocates_nothing():
    # A 96-token prompt (6 pages) leaves its 96 prompt tokens in the tree (inserted at its
    # transfer, and again at its finish with 99 committed, page-floored). The same prompt again is looked up whole, not len - 1 (that
    # would floor 95 to 80): all 96 hit, nothing is allocated, the transfer writes nothing.
    cfg = EngineConfig(spec="none", page_size=PS, pool_tokens=2048, reserved_decode_tokens=0, pd_radix=True,
                       audit="raise")
    prompt = list(range(1, 97))
    seen = arrivals(Engine(cfg), [Request(rid=0, prompt=prompt, max_new_tokens=4, fill_len=96),
                                  Request(rid=1, prompt=prompt, max_new_tokens=4, fill_len=96, arrival_step=10)])
    assert seen[0][:2] == (0, 6)
    assert seen[1][:2] == (96, 0)


def test_an_arrival_hits_the_prompt_of_one_still_running():
    # SGLang's process_prebuilt checkpoints each transferred prompt into the decode tree
    # before it decodes, so request 1 (arriving 2 steps later, while request 0 still has
    # ~60 outputs to go) hits request 0's page-floored 96 prompt tokens already.
    cfg = EngineConfig(spec="none", page_size=PS, pool_tokens=2048, reserved_decode_tokens=0, pd_radix=True,
                       audit="raise")
    prompt = list(range(1, 101))
    first = Request(rid=0, prompt=prompt, max_new_tokens=64, fill_len=100)
    engine, running = Engine(cfg), []
    prealloc = engine.manager.pd_prealloc
    engine.manager.pd_prealloc = lambda s, n: (running.append(s.rid == 1 and first.remaining > 0), prealloc(s, n))[1]
    seen = arrivals(engine, [first, Request(rid=1, prompt=prompt + [7, 8], max_new_tokens=4, fill_len=102,
                                            arrival_step=2)])
    assert running == [False, True]  # request 0 was still decoding when request 1 came
    assert seen[1] == (96, 1, 0)
