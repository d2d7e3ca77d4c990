"""The chunked-prefill budget (mini_engine.scheduler.prefill_tokens): SGLang's page charge and page cut,
the raw-length fit of the chunk cache's fixed-length path, and the what-if profiles' raw rule."""

from __future__ import annotations

from mini_engine.scheduler.prefill_tokens import PrefillTokens
from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.request import Request


def _fill(budget: PrefillTokens, prompts: list[int]) -> list[int]:
    got = []
    for n in prompts:
        if not budget.open:
            break
        first = budget.first_chunk(n, alone=not got)
        if first == 0:
            break
        budget.charge(first)
        got.append(first)
    return got


def test_twenty_prompts_of_37_tokens():
    pages = _fill(PrefillTokens(512, 16), [37] * 20)
    assert len(pages) == 11 and sum(pages) == 402 and pages[-1] == 32
    tokens = _fill(PrefillTokens(512, 16, "tokens"), [37] * 20)
    assert len(tokens) == 14 and sum(tokens) == 512 and tokens[-1] == 31


def test_an_empty_cut_closes_the_batch():
    # A 100-token request is cut at floor_ps(40) = 32; the 8 left are under a page.
    b = PrefillTokens(40, 16)
    assert _fill(b, [100, 5]) == [32]  # the 5-token one would cost 16: it waits
    assert b.left == 8 and b.first_chunk(5) == 0


def test_the_raw_fit_takes_a_request_its_ceiled_length_would_split():
    # 40 left (a chunk size off the page grid): 37 tokens fit raw, not ceiled (48 > 40).
    assert PrefillTokens(40, 16).first_chunk(37) == 32
    assert PrefillTokens(40, 16, raw_fit=True).first_chunk(37) == 37
    assert PrefillTokens(40, 16, raw_fit=True).first_chunk(45) == 40  # the cut lands at left itself


def test_a_budget_under_one_page_still_makes_progress():
    b = PrefillTokens(8, 16)
    assert b.first_chunk(37) == 0 and b.first_chunk(37, alone=True) == 8
    cfg = EngineConfig(spec="none", page_size=16, chunked_prefill=8, pool_tokens=64 * 16)
    result = Engine(cfg).run([Request(rid=i, prompt=list(range(37)), max_new_tokens=3) for i in range(3)])
    assert result.verdict == "ok"


def _first_batch(profile: str) -> list[int]:
    cfg = EngineConfig(spec="none", page_size=16, chunked_prefill=512, pool_tokens=4096 * 16, profile=profile)
    engine = Engine(cfg)
    engine.submit([Request(rid=i, prompt=list(range(37)), max_new_tokens=8) for i in range(20)])
    engine.sched.arrive(0)
    chunks, _ = engine.sched.admit()
    return [c.end - c.start for c in chunks]


def test_the_sglang_profiles_charge_pages_the_what_if_keeps_tokens():
    for profile in ("sglang-0.5.23", "sglang-pre-35265", "host-aligned"):
        assert sum(_first_batch(profile)) == 402, profile
    assert sum(_first_batch("floor-free")) == 512
