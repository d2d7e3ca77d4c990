"""The duplicates a checkpoint frees, call by call, as each release's tree frees them.

When a request's insert finds part of its key already in the tree, the request's own
copies of that part go back to the pool. SGLang 0.5.23's full-attention tree
(UnifiedRadixCache with the FULL component) frees them inside the insert, one free per
node the insert walked; 0.5.18's RadixCache leaves them to its caller, which frees the
range in one call (mini_engine/memory/tree/prefix.py, ``MemoryRules.release``).
Outside a free group at page size > 1 each call goes in front of the free list, so the
split decides which pages later allocations get.

Worked case: three PD arrivals at step 0 on the decode side's radix cache, a pool the
budget admits all three from at once (their checkpoints run one after another, outside a
free group, as process_prebuilt's do), page size 16, prompts
nested as P[:32]+x, P+a, P+b (P: 64 tokens). The first inserts one node; the second
walks it, splits it at 32 and frees [0, 32); the third walks two nodes (P[:32] and
P[32:64], split off the second's leaf) and frees [0, 32) and [32, 64), two calls.
``kvbench conform`` on 0.5.23 replays the inserts on UnifiedRadixCache and checks the
trace's free records after each insert against the frees the insert made.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from harness.conform.check import conform, describe
from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine, open_trace
from mini_engine.request import Request

PS = 16


def _nested_trace(path, profile: str) -> list[dict]:
    cfg = EngineConfig(page_size=PS, pool_tokens=4096 * PS, max_context=256, pd_radix=True, audit="raise",
                       profile=profile)
    rng = np.random.default_rng(1)
    p = rng.integers(1, 400, 64).tolist()
    prompts = [p[:32] + rng.integers(1, 400, 16).tolist(), p + rng.integers(1, 400, 16).tolist(),
               p + rng.integers(1, 400, 16).tolist()]
    reqs = [Request(rid=i, prompt=x, max_new_tokens=4, fill_len=len(x)) for i, x in enumerate(prompts)]
    with open_trace(cfg, path) as trace:
        res = Engine(cfg, trace=trace).run(reqs)
    assert res.verdict == "ok", res.error
    return [json.loads(line) for line in path.read_text().splitlines()]


def _frees_after_inserts(recs: list[dict]) -> dict[int, list[list[int]]]:
    """rid -> the free_pages calls right after that request's first insert."""
    out = {}
    for i, r in enumerate(recs):
        if r.get("op") == "insert" and r["rid"] not in out:
            calls = []
            for nxt in recs[i + 1:]:
                if nxt.get("op") != "free_pages":
                    break
                calls.append(nxt["page_ids"])
            out[r["rid"]] = calls
    return out


@pytest.mark.parametrize("profile, third", [("sglang-0.5.23", 2), ("sglang-pre-35265", 1)])
def test_the_duplicates_are_freed_per_node_or_in_one_call(tmp_path, profile, third):
    frees = _frees_after_inserts(_nested_trace(tmp_path / "t.jsonl", profile))
    assert [len(frees[r]) for r in (0, 1, 2)] == [0, 1, third]
    assert [len(c) for c in frees[1]] == [2]  # [0, 32): two pages
    assert sum(len(c) for c in frees[2]) == 4  # [0, 64): four pages, in one call or two


def test_the_one_call_conforms_on_0518s_radix_cache(sg, tmp_path):
    """0.5.18's RadixCache frees no duplicates itself (its caller's one call is kvbench's):
    conform checks no insert's frees there, and the pre-35265 trace conforms."""
    if sg.version != "0.5.18":
        pytest.skip("a pre-35265 trace conforms on 0.5.18 only (CI's 0.5.18 venv)")
    src = tmp_path / "t.jsonl"
    _nested_trace(src, "sglang-pre-35265")
    rep = conform(src, sg)
    assert rep.conforms, describe(rep.first_divergence)
    assert rep.tree_calls > 0


def test_the_per_node_frees_conform_and_one_call_diverges(sg, tmp_path):
    if sg.version == "0.5.18":
        pytest.skip("0.5.18's tree frees no duplicates itself: the test above")
    src, bad = tmp_path / "t.jsonl", tmp_path / "bad.jsonl"
    recs = _nested_trace(src, "sglang-0.5.23")
    rep = conform(src, sg)
    assert rep.conforms, describe(rep.first_divergence)
    # The third request's two calls merged into one: the same pages, another call sequence.
    i = next(i for i, r in enumerate(recs) if r.get("op") == "insert" and r["rid"] == 2)
    assert recs[i + 1]["op"] == recs[i + 2]["op"] == "free_pages"
    merged = dict(recs[i + 2], page_ids=recs[i + 1]["page_ids"] + recs[i + 2]["page_ids"])
    lines = [json.dumps(r) for r in recs[:i + 1]] + [json.dumps(merged)] + [json.dumps(r) for r in recs[i + 3:]]
    bad.write_text("\n".join(lines) + "\n")
    d = conform(bad, sg).first_divergence
    assert d is not None and d.field.startswith("duplicates freed (insert of rid 2"), describe(d)
    # The same trace ending right after those frees: checked when the trace ends.
    bad.write_text("\n".join(lines[: i + 2]) + "\n")
    d = conform(bad, sg).first_divergence
    assert d is not None and d.field.startswith("duplicates freed (insert of rid 2"), describe(d)
