"""The SWA-aware tree's EAGLE keys and early window-lock release (mini_engine/memory/tree/swa_radix.py,
swa_prefix.py): worked examples, and engine runs whose traces replay on kvbench's own tree.

The same calls run side by side on SGLang's UnifiedRadixCache in
suites/unit/conform/test_swa_radix_vs_sglang.py and test_swa_prefix_engine_vs_sglang.py;
the numbers below are the ones that class gives (page size 4, window 8, tokens 1..24).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from mini_engine.algos import writers
from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine, open_trace
from mini_engine.errors import TraceError
from mini_engine.memory.replay.run import replay
from mini_engine.memory.trace.tree_calls import tree_key
from mini_engine.request import Request
from suites.unit.memory.tree.test_swa_radix import PS, TOKENS, _tree


def test_an_early_swa_release_leaves_the_prefix_swa_evictable_and_the_full_locked():
    pools, tree = _tree()
    slots = pools.alloc(24)
    _, leaf = tree.insert(TOKENS, slots)  # [0, 16) and its newest window [16, 24), both live
    delta, uuid = tree.inc_lock_ref(leaf)  # FULL: the whole path; SWA: the leaf (a window)
    assert (delta, tree.swa_evictable, tree.swa_protected) == (-24, 16, 8)
    assert tree.evict(0, 24) == (0, 16)  # the window lock keeps the leaf's SWA: only [0, 16) goes

    pools, tree = _tree()
    _, leaf = tree.insert(TOKENS, pools.alloc(24))
    _, uuid = tree.inc_lock_ref(leaf)
    tree.dec_swa_lock_only(leaf, uuid)  # the request's window left its prefix
    assert (tree.swa_evictable, tree.swa_protected, tree.full_protected) == (24, 0, 24)
    assert tree.evict(0, 24) == (0, 24)  # both nodes tombstoned; no FULL freed (it is locked)
    assert tree.match_prefix(TOKENS)[0].size == 0  # no live window left to end a match on
    with pytest.raises(ValueError, match="SWA lock release on an unlocked node"):
        tree.dec_lock_ref(leaf, uuid)  # the SWA part once only: the unlock must skip it
    pools, tree = _tree()
    _, leaf = tree.insert(TOKENS, pools.alloc(24))
    _, uuid = tree.inc_lock_ref(leaf)
    tree.dec_swa_lock_only(leaf, uuid)
    assert tree.dec_lock_ref(leaf, uuid, skip_swa=True) == 24  # the FULL part: all evictable again
    assert (tree.full_evictable, tree.full_protected, tree.swa_evictable) == (24, 0, 24)


def test_bigram_keys_are_one_shorter_and_a_change_costs_the_page_before_it():
    """EAGLE's keys: 25 raw tokens make 24 bigrams (six pages of slots). A request that
    differs at raw token 16 shares bigrams 0..14 only, so its match stops a page earlier
    than a token key's would."""
    pools, tree = _tree()
    raw = TOKENS + [25]
    key = tree_key(raw, True)
    assert len(key) == 24
    cached, _ = tree.insert(key, pools.alloc(24))
    assert cached == 0
    other = raw[:16] + [99] + raw[17:]
    assert tree.match_prefix(tree_key(other, True))[0].size == 12  # bigram 15 = (16, 99) differs
    assert tree.match_prefix(other[:24])[0].size == 0  # raw tokens do not key a bigram tree


def _engine(tmp_path, spec: dict | None = None, release: bool = False):
    """A shared-prompt SWA run into a trace. release: each running request's lock gives up
    its SWA part once the request has decoded a window past its prompt (SGLang's
    maybe_evict_swa under SGLANG_OPT_RELEASE_PREFILL_SWA), driven here from outside the
    step loop since no default SGLang path makes that call."""
    cfg = EngineConfig(page_size=PS, pool_tokens=200 * PS, max_context=512, max_running=4, chunked_prefill=64,
                       window=16, audit="raise", **(spec or {}))
    rng = np.random.default_rng(7)
    system = rng.integers(1, 400, 120).tolist()
    reqs = [Request(rid=i, prompt=system[: 60 + 13 * (i % 4)] + rng.integers(1, 400, 6).tolist(),
                    max_new_tokens=24 + 8 * (i % 3), arrival_step=2 * i) for i in range(10)]
    path = tmp_path / "swa.jsonl"
    with open_trace(cfg, path) as trace:
        e = Engine(cfg, trace=trace)
        e.submit(reqs)
        while e.sched.has_work():
            e.tick()
            for r in list(e.sched.running) if release else ():
                if r.kv is not None and len(r.outputs) >= cfg.window:
                    e.manager.prefix.release_swa(r.kv.row)
        e._drain()
    assert all(r.remaining <= 0 for r in reqs)
    return e, path, [json.loads(x) for x in path.read_text().splitlines()[1:]]


def test_an_eagle_swa_run_keys_its_tree_by_bigrams_and_replays(tmp_path):
    e, path, recs = _engine(tmp_path, {"spec": "eagle", "topk": 1, "steps": 3})
    assert e.manager.prefix.bigram and {"op": "swa_tree", "window": 16, "bigram": True} in recs
    assert any(r["op"] == "swa_match" and r["matched"] > 0 for r in recs)
    assert replay(path, writers()).divergences == 0
    # Read as token keys, the records do not run: each insert has a slot per bigram.
    lines = path.read_text().splitlines()
    head = [json.loads(x) for x in lines]
    at = next(i for i, r in enumerate(head) if r.get("op") == "swa_tree")
    head[at]["bigram"] = False
    path.write_text("".join(json.dumps(r) + "\n" for r in head))
    with pytest.raises(TraceError, match="swa_insert of a"):
        replay(path, writers())


def test_early_swa_releases_are_traced_and_replay(tmp_path):
    e, path, recs = _engine(tmp_path, release=True)
    released = [r for r in recs if r["op"] == "swa_release_swa"]
    skipped = [r for r in recs if r["op"] == "swa_unlock" and r.get("skip_swa")]
    assert released and len(skipped) == len(released)  # each such lock's unlock frees its FULL part only
    assert not e.manager.prefix.swa_released and not e.manager.prefix.locks
    assert replay(path, writers()).divergences == 0
