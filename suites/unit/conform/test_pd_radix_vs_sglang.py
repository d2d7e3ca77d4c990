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

from harness.conform import conform, describe
from mini_engine.config import EngineConfig
from mini_engine.engine import Engine, open_trace
from mini_engine.profiles import SGLANG_VERSIONS
from mini_engine.request import Request


@pytest.mark.parametrize("ps", [1, 16])
@pytest.mark.parametrize("window", [None, 32])
def test_decode_radix_hits_conform(sg, tmp_path, ps, window):
    profile = next(p for p, v in SGLANG_VERSIONS.items() if v == sg.version)
    kw = dict(window=window, layer_pattern="1:1") if window else {}
    cfg = EngineConfig(spec="none", page_size=ps, pool_tokens=4096, reserved_decode_tokens=0, pd_radix=True,
                       profile=profile, audit="raise", **kw)
    first = list(range(1, 201))
    reqs = [Request(rid=0, prompt=first, max_new_tokens=4, fill_len=200),
            Request(rid=1, prompt=first + list(range(500, 600)), max_new_tokens=4, fill_len=300, arrival_step=10),
            Request(rid=2, prompt=first, max_new_tokens=4, fill_len=200, arrival_step=20)]
    path = tmp_path / "t.jsonl"
    with open_trace(cfg, path) as trace:
        engine = Engine(cfg, trace=trace)
        res = engine.run(reqs)
    assert res.verdict == "ok", res.error
    records = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    matches = [r for r in records if r["op"] in ("match", "swa_match")]
    # Each arrival looked up its prompt (0.5.23 with SWA at ps 16: up to its tail), and one hit.
    assert len(matches) == 3 and any(m["matched"] > 0 for m in matches)
    assert engine.manager.prefix.hit_tokens == sum(m["matched"] for m in matches)
    released = any(r["op"] == "swa_release_swa" for r in records)
    assert released == (window is not None and ps > 1 and sg.version != "0.5.18")
    rep = conform(path, sg)
    assert rep.conforms, describe(rep.first_divergence)
