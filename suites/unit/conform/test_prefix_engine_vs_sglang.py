"""The engine's tree calls (mini_engine/memory/tree/prefix.py), as its trace records them, on SGLang's own RadixCache.

An engine run with shared prefixes, a pool small enough to evict, writes every call its
PrefixCache makes on the tree into the allocation trace (matches, inserts with their
slots, locks, unlocks, evictions: memory/trace/tree_calls.py). ``kvbench conform`` runs the
same calls, in trace order between the allocator calls, on SGLang's own tree (compiled
from the installed source, on a counter clock: harness/conform/sglang_radix.py) and must get
the same matched lengths, the same length already cached per insert, the same lock
deltas, the same evicted pages and the same evictable and protected sizes after every
call; kvbench's own replay must too. A record changed after the run (a matched length,
an evicted page) is a divergence that names it.

Each test runs under the installed release with its profile's traces: sglang-0.5.23 on
0.5.23, sglang-pre-35265 on 0.5.18 (CI's 0.5.18 venv runs this file too, so 0.5.18's
tree, compiled from its own source, is checked there).
"""

from __future__ import annotations

import json
from array import array

import numpy as np
import pytest

from harness.conform.check import conform, describe
from harness.conform.sglang_radix import matched_len, radix_cache, radix_namespace
from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine, open_trace
from mini_engine.algos import writers
from mini_engine.memory.replay.run import replay
from mini_engine.config.profiles import SGLANG_VERSIONS
from mini_engine.request import Request

TREE_CALLS = ("match", "insert", "lock", "unlock", "evict")


def _engine_trace(path, sg, ps: int, pages: int, stagger: int, spec: dict | None = None) -> dict:
    """Run 14 requests over two shared prompts into a trace at path, under the profile of
    the installed release sg; the run's stats."""
    profile = next(p for p, v in SGLANG_VERSIONS.items() if v == sg.version)
    cfg = EngineConfig(page_size=ps, pool_tokens=pages * ps, max_context=512, max_running=4, chunked_prefill=256,
                       audit="raise", profile=profile, **(spec or {}))
    rng = np.random.default_rng(ps)
    groups = [rng.integers(1, 400, 200).tolist() for _ in range(2)]
    reqs = [Request(rid=i, prompt=groups[i % 2][: 60 + 17 * (i % 5)] + rng.integers(1, 400, 5 + 7 * (i % 3)).tolist(),
                    max_new_tokens=20 + 9 * (i % 4), arrival_step=i * stagger) for i in range(14)]
    with open_trace(cfg, path) as trace:
        res = Engine(cfg, trace=trace).run(reqs)
    assert res.verdict == "ok", res.error
    return res.stats


def _records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("ps, pages, stagger", [(16, 30, 3), (4, 200, 2), (1, 700, 5)])
def test_engine_tree_calls_conform_on_sglangs_tree(sg, tmp_path, ps, pages, stagger):
    path = tmp_path / "t.jsonl"
    stats = _engine_trace(path, sg, ps, pages, stagger)
    ops = {r.get("op") for r in _records(path)[1:]}
    assert {"tree", "tokens", "match", "insert", "lock", "unlock"} <= ops
    rep = conform(path, sg)
    assert rep.conforms, describe(rep.first_divergence)
    assert rep.tree_calls == sum(r.get("op") in TREE_CALLS for r in _records(path)[1:]) > 0
    mine = replay(path, writers())
    assert mine.divergences == 0, mine.first_divergence
    assert mine.tree_calls == rep.tree_calls
    if ps == 16:
        assert "evict" in ops and stats["tree_evicted_pages"] > 0


def test_the_tree_is_compiled_from_the_installed_release(sg):
    """0.5.18's match result carries the matched slots, 0.5.23's their count: the classes
    conform runs are the installed release's own, and matched_len reads either."""
    ns = radix_namespace(sg.torch)
    fields = ns["MatchResult"]._fields
    assert ("device_indices" in fields) == (sg.version == "0.5.18") != ("device_prefix_len" in fields)
    tree = radix_cache(ns, 2, None)
    key = ns["RadixKey"](array("q", [5, 6, 7, 8]))
    assert tree.insert(ns["InsertParams"](key=key, value=sg.torch.arange(10, 14))).prefix_len == 0
    res = tree.match_prefix(ns["MatchPrefixParams"](key=ns["RadixKey"](array("q", [5, 6, 7, 1]))))
    assert matched_len(res) == 2 and tree.evictable_size() == 4  # the first page of two


def test_eagle_bigram_keys_conform(sg, tmp_path):
    """EAGLE keys the tree by bigrams: the trace says so, and SGLang's tree (is_eagle) agrees."""
    path = tmp_path / "t.jsonl"
    _engine_trace(path, sg, 4, 200, 2, {"spec": "eagle", "topk": 1, "steps": 3})
    records = _records(path)
    assert {"op": "tree", "bigram": True} in records
    assert any(r.get("op") == "match" and r["matched"] > 0 for r in records[1:])  # the keys did share
    rep = conform(path, sg)
    assert rep.conforms, describe(rep.first_divergence)
    assert rep.tree_calls > 0


def _tampered(src, dst, op: str, edit) -> int:
    """Copy the trace src to dst with edit(record) applied to the first `op` record it
    changes (edit returns True); that record's call index."""
    lines = src.read_text().splitlines()
    for i, line in enumerate(lines[1:], start=1):
        rec = json.loads(line)
        if rec.get("op") == op and edit(rec):
            lines[i] = json.dumps(rec)
            dst.write_text("\n".join(lines) + "\n")
            return i
    raise AssertionError(f"no {op} record to tamper with")


def _bump_matched(rec: dict) -> bool:
    if rec["matched"] == 0:
        return False
    rec["matched"] -= 1
    return True


def _swap_evicted(rec: dict) -> bool:
    if len(rec["pages"]) < 2:
        return False
    rec["pages"][:2] = rec["pages"][1::-1]
    return True


@pytest.mark.parametrize("op, edit, field", [
    ("match", _bump_matched, "matched"),
    ("evict", _swap_evicted, "pages"),
    ("lock", lambda r: r.update(delta=r["delta"] - 1) or True, "delta"),
])
def test_a_tampered_tree_record_diverges(sg, tmp_path, op, edit, field):
    src, bad = tmp_path / "t.jsonl", tmp_path / "bad.jsonl"
    _engine_trace(src, sg, 16, 30, 3)
    call = _tampered(src, bad, op, edit)
    rep = conform(bad, sg)
    assert not rep.conforms
    d = rep.first_divergence
    assert (d.call, d.op) == (call, op) and d.field.startswith(field), describe(d)
    assert d.expected != d.got
    mine = replay(bad, writers())
    assert mine.first_divergence.call == call and mine.first_divergence.field == field


def test_an_evictions_frees_out_of_the_trees_order_diverge(sg, tmp_path):
    """The free_pages records of an eviction carry SGLang's eviction order: two of a
    leaf's pages swapped there free the same pages (the allocator's count agrees) in
    another free-list order, which the evict record's check catches."""
    src, bad = tmp_path / "t.jsonl", tmp_path / "bad.jsonl"
    _engine_trace(src, sg, 16, 30, 3)
    lines = src.read_text().splitlines()
    recs = [json.loads(x) for x in lines]
    i = next(i for i in range(2, len(recs)) if recs[i].get("op") == "evict"
             and recs[i - 1]["op"] == "free_pages" and len(recs[i - 1]["page_ids"]) >= 2)
    free = recs[i - 1]
    free["page_ids"][:2] = free["page_ids"][1::-1]
    lines[i - 1] = json.dumps(free)
    bad.write_text("\n".join(lines) + "\n")
    d = conform(bad, sg).first_divergence
    assert (d.call, d.op, d.field) == (i, "evict", "pages (the free_pages records before it)"), describe(d)


def test_a_trace_without_tree_records_still_replays_and_conforms(sg, tmp_path):
    """A version 1 trace (written before the tree records) is the same run less those records."""
    src, old = tmp_path / "t.jsonl", tmp_path / "v1.jsonl"
    _engine_trace(src, sg, 16, 30, 3)
    head, *records = _records(src)
    kept = [r for r in records if r["op"] not in ("tree", "tokens", *TREE_CALLS)]
    assert len(kept) < len(records)
    old.write_text("\n".join(json.dumps(r) for r in [dict(head, version=1), *kept]) + "\n")
    rep = conform(old, sg)
    assert rep.conforms and rep.tree_calls == 0 and rep.allocator_calls > 0, rep
    mine = replay(old, writers())
    assert mine.divergences == 0 and mine.tree_calls == 0

