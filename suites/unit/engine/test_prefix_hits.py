"""Prefix hits counted as SGLang counts them (req.cached_tokens), on a worked case.

SGLang's ScheduleBatch.prepare_for_extend adds a request's hit (pre_len - already_computed)
only while its retracted_stain is unset: a retracted request's re-admission matches what it
had computed, but that hit is not in its cached_tokens (0.5.23 and 0.5.18 alike). kvbench's
prefix_hit_tokens is that figure; readmit_hit_tokens holds the re-admissions' hits apart.

The case, page size 16, full attention, the radix cache, overlap off: request 0 (80 tokens)
matches nothing and its prefill checkpoints 80 tokens (5 pages) into the tree. Request 1,
the same prompt, arrives after it and matches the page-aligned part of its first 79 tokens:
64 tokens. Request 0 is then retracted after 3 outputs; admitted again it looks up its 83
tokens (prompt and outputs), matches the 80 the tree holds, and SGLang counts none of them.
"""

from __future__ import annotations

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.request import Request, Status

PS = 16


def test_a_re_admission_hit_is_not_a_prefix_hit():
    cfg = EngineConfig(page_size=PS, pool_tokens=256 * PS, max_context=512, prefix_cache="radix", overlap=False,
                       audit="raise")
    engine = Engine(cfg)
    prompt = list(range(1, 81))
    first = Request(rid=0, prompt=prompt, max_new_tokens=16)
    second = Request(rid=1, prompt=list(prompt), max_new_tokens=16, arrival_step=2)
    engine.submit([first, second])
    while len(first.outputs) < 3:
        engine.tick()
    assert engine.manager.prefix.hit_tokens == 64  # request 1's first admission
    engine.sched.retract(first)
    assert first.status is Status.WAITING
    res = engine.run()
    assert res.verdict == "ok", res.error
    assert first.retractions == 1 and len(first.outputs) == 16
    assert res.stats["prefix_hit_tokens"] == 64
    assert res.stats["readmit_hit_tokens"] == 80
    # The rate's denominator is the first admissions' lookups too: 80 prompt tokens each.
    assert res.stats["prefix_hit_rate"] == 64 / (2 * 80)
