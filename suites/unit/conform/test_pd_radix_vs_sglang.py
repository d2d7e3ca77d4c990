"""PD arrivals that hit the decode side's radix tree, replayed on the installed SGLang.

suites/unit/engine/test_pd_radix_match.py's worked runs (a prompt finished on the decode
side, then an arrival that repeats it or continues it), traced under the installed
release's profile: every tree call (the arrival's whole-prompt match, its lock, 0.5.23's
early release of the lock's SWA part) and every allocator call (the prealloc past the
hit) must be SGLang's, call by call. Release-neutral: CI runs it under 0.5.23 and 0.5.18.
"""

from __future__ import annotations

import json

import pytest

from harness.conform.check import conform, describe
from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine, open_trace
from mini_engine.config.profiles import SGLANG_VERSIONS
from mini_engine.request import Request


# (ps, window, first prompt) -> each arrival's (key length, hit) under 0.5.23 and 0.5.18.
# Request 0 is the first prompt, request 1 continues it by 100 tokens, request 2 repeats it.
# Worked at ps 16, window 32 (tail window start floor_16(fill - 1 - 32)): 0.5.23 looks up
# 160 / 256 / 160 tokens; request 1 hits request 0's 192 tokens (live SWA over [160, 192)),
# request 2's key ends at 160, where the SWA below is gone: no hit. 0.5.18 looks up the
# whole prompts and request 2 hits 192. At window 128 with a 100-token prompt the hit of
# request 1 (64) is shorter than a window: 0.5.23 releases its SWA part all the same.
CASES = {
    (1, None, 200): ([(200, 0), (300, 200), (200, 200)], [(200, 0), (300, 200), (200, 200)]),
    (16, None, 200): ([(200, 0), (300, 192), (200, 192)], [(200, 0), (300, 192), (200, 192)]),
    (1, 32, 200): ([(200, 0), (300, 200), (200, 200)], [(200, 0), (300, 200), (200, 200)]),
    (16, 32, 200): ([(160, 0), (256, 192), (160, 0)], [(200, 0), (300, 192), (200, 192)]),
    (16, 128, 100): ([(0, 0), (64, 64), (0, 0)], [(100, 0), (200, 96), (100, 96)]),
}


@pytest.mark.parametrize("ps, window, first_len", list(CASES))
def test_decode_radix_hits_conform(sg, tmp_path, ps, window, first_len):
    new = sg.version != "0.5.18"
    profile = next(p for p, v in SGLANG_VERSIONS.items() if v == sg.version)
    kw = dict(window=window, layer_pattern="1:1") if window else {}
    cfg = EngineConfig(spec="none", page_size=ps, pool_tokens=4096, reserved_decode_tokens=0, pd_radix=True,
                       profile=profile, audit="raise", **kw)
    first = list(range(1, first_len + 1))
    reqs = [Request(rid=0, prompt=first, max_new_tokens=4, fill_len=first_len),
            Request(rid=1, prompt=first + list(range(500, 600)), max_new_tokens=4, fill_len=first_len + 100,
                    arrival_step=10),
            Request(rid=2, prompt=first, max_new_tokens=4, fill_len=first_len, arrival_step=20)]
    path = tmp_path / "t.jsonl"
    with open_trace(cfg, path) as trace:
        engine = Engine(cfg, trace=trace)
        res = engine.run(reqs)
    assert res.verdict == "ok", res.error
    records = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    matches = [(r["len"], r["matched"]) for r in records if r["op"] in ("match", "swa_match")]
    assert matches == CASES[ps, window, first_len][0 if new else 1]
    assert engine.manager.prefix.hit_tokens == sum(m for _, m in matches)
    released = sum(r["op"] == "swa_release_swa" for r in records)
    assert released == (1 if window is not None and ps > 1 and new else 0)
    rep = conform(path, sg)
    assert rep.conforms, describe(rep.first_divergence)


# Request 0 (200 tokens, 60 outputs) still decodes when request 1 (its prompt and 50 more)
# and request 2 (its first 180 tokens) arrive: their hits come from request 0's prompt as
# its transfer checkpointed it (process_prebuilt). Request 1's hit per (algorithm, ps,
# window): the page-floored prompt (EAGLE keys bigrams: 199 at ps 1), none at window 128
# under 0.5.23, whose key stops at 112: a match ending there needs SWA from 0, and request
# 0 keeps it only from 64 (its tail).
RUNNING = {(1, None): 200, (16, None): 192, (1, 32): 200, (16, 32): 192, (16, 128): 192}


@pytest.mark.parametrize("spec", [{}, {"spec": "eagle", "topk": 1, "steps": 3}])
@pytest.mark.parametrize("ps, window", list(RUNNING))
def test_hits_on_a_running_requests_prompt_conform(sg, tmp_path, spec, ps, window):
    new = sg.version != "0.5.18"
    profile = next(p for p, v in SGLANG_VERSIONS.items() if v == sg.version)
    kw = dict(window=window, layer_pattern="1:1") if window else {}
    cfg = EngineConfig(page_size=ps, pool_tokens=4096, reserved_decode_tokens=0, pd_radix=True, profile=profile,
                       audit="raise", **kw, **spec)
    first = list(range(1, 201))
    reqs = [Request(rid=0, prompt=first, max_new_tokens=60, fill_len=200),
            Request(rid=1, prompt=first + list(range(500, 550)), max_new_tokens=8, fill_len=250, arrival_step=2),
            Request(rid=2, prompt=first[:180], max_new_tokens=8, fill_len=180, arrival_step=4)]
    path = tmp_path / "t.jsonl"
    with open_trace(cfg, path) as trace:
        res = Engine(cfg, trace=trace).run(reqs)
    assert res.verdict == "ok", res.error
    records = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    hits = {r["rid"]: r["matched"] for r in records if r["op"] in ("match", "swa_match")}
    want = 0 if new and window == 128 else RUNNING[ps, window] - (1 if spec and ps == 1 else 0)
    assert hits[1] == want
    rep = conform(path, sg)
    assert rep.conforms, describe(rep.first_divergence)
