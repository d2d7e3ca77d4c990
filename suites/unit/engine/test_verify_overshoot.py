"""SGLang's two spec-v2 rules at a request's last verify, worked on one request: 0.5.23's
and 0.5.18's (sglang-pre-35265), which keys the tree on the whole committed run.

DFLASH, block 16, ps 1 (a page per slot, so tree pages are tokens), prompt 37, every verify
accepts 8 (the bonus included); the prefill gives the first output. So the outputs go
1 -> 9 -> 17: with max_new 10 or 16 the second or third verify overshoots the limit, with
17 it ends on it exactly. Against SGLang's own loops: kvbench conform --engine --suite smoke
on each release (CI), equal on every step since these rules.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.errors import ConfigError
from mini_engine.config.profiles import PROFILES
from mini_engine.request import Request
from mini_engine.decode.verify_commit import committed

PROMPT = 37


def _run(profile: str, outputs: int, overlap: str | None = None) -> dict:
    cfg = EngineConfig(spec="dflash", block_size=16, page_size=1, accept_len=8, pool_tokens=1 << 14,
                       max_context=512, profile=profile, overlap=overlap)
    eng = Engine(cfg)
    eng.submit([Request(0, list(range(1, PROMPT + 1)), outputs)])
    res = eng.run()
    assert res.verdict == "ok" and res.stats["leaked_pages"] == 0
    assert res.stats["output_tokens"] == outputs
    return res.stats


def test_committed_by_rule():
    run, left = np.array([8, 8, 5]), np.array([3, 8, 9])
    assert committed(run, left, "cut").tolist() == [3, 8, 5]
    # owned: an overshooting run commits one past the limit (prompt + max_new reaches the tree)
    assert committed(run, left, "owned").tolist() == [4, 8, 5]
    assert committed(run, left, "whole").tolist() == [8, 8, 5]  # 0.5.18: all of it


@pytest.mark.parametrize("outputs, tree_0523, tree_0518, tree_cut", [
    # 9 outputs, then a run of 8 against 1 left: 0.5.23 keeps 37 + 10, 0.5.18 the whole
    # committed run 37 + 1 + 8 + 8 - 1 = 53, kvbench's cut 37 + 9
    (10, 47, 53, 46),
    (16, 53, 53, 52),  # 9, then 8 against 7 left: 37 + 16, 53, 37 + 15
    (17, 53, 53, 53),  # 9, then 8 against 8 left, exactly: the last output's KV is never written, 37 + 16
])
def test_overshooting_finish_leaves_what_each_release_keys_to_the_tree(outputs, tree_0523, tree_0518, tree_cut):
    # 0.5.23's release_kv_cache: owned_kv_len = min(kv_committed_len, prompt + finished_len),
    # committed being the whole accepted run; 0.5.18's: effective_kv_committed_len, no cap.
    # Overlap off so only the commit rule is in play.
    assert _run("sglang-0.5.23", outputs, overlap="off")["tree_pages"] == tree_0523
    assert _run("sglang-pre-35265", outputs, overlap="off")["tree_pages"] == tree_0518
    assert _run("host-aligned", outputs)["tree_pages"] == tree_cut  # a design keeps the cut


@pytest.mark.parametrize("outputs, steps_0523, steps_cut", [
    # 9 outputs when the third plan runs: 9 + 1 >= 10 is one output short, so 0.5.23's
    # _reqs_finishing_inflight keeps it out; nothing is launched after the second verify.
    (10, 4, 4),
    # 9 + 1 < 16 (and < 17): the third verify is launched with the request, the second's result
    # then finishes it, and the third's (skipped) result is processed in a fifth iteration.
    (16, 5, 4),
    (17, 5, 4),
])
def test_batch_launched_for_a_finishing_verify_lands_a_step_later(outputs, steps_0523, steps_cut):
    s = _run("sglang-0.5.23", outputs)
    assert (s["steps"], s["decode_steps"]) == (steps_0523, 3 if steps_0523 == 5 else 2)
    # 0.5.18 plans every running request (no _reqs_finishing_inflight): the third verify is
    # launched in every case, and processed in a fifth iteration.
    s = _run("sglang-pre-35265", outputs)
    assert (s["steps"], s["decode_steps"]) == (5, 3)
    assert _run("host-aligned", outputs, overlap="on")["steps"] == steps_cut  # a design with overlap: kvbench's loop
    # Without overlap every result lands in its own step: prefill, then one step per verify.
    assert _run("sglang-0.5.23", outputs, overlap="off")["steps"] == 3
    assert _run("sglang-pre-35265", outputs, overlap="off")["steps"] == 3


def test_only_the_sglang_profiles_follow_them():
    assert PROFILES["sglang-0.5.23"].verify_commit == "owned" and PROFILES["sglang-0.5.23"].launch_finished
    assert PROFILES["sglang-pre-35265"].verify_commit == "whole" and PROFILES["sglang-pre-35265"].launch_finished
    for name in ("host-aligned", "floor-free"):
        assert PROFILES[name].verify_commit == "cut" and not PROFILES[name].launch_finished


def test_bad_verify_commit_is_one_line():
    with pytest.raises(ConfigError) as err:
        dataclasses.replace(PROFILES["sglang-0.5.23"], verify_commit="all")
    assert "verify_commit" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("profile, overlap, steps, tree", [
    ("sglang-0.5.23", None, 6, 41),  # the one-short request sits the last plan out: 37 + 5 - 1
    # 0.5.18 plans it: the slot allocated for it is committed (alloc_for_decode) and its release
    # keys the committed length uncapped, 37 + 5; the launched batch's result lands a step later.
    ("sglang-pre-35265", None, 7, 42),
    ("sglang-pre-35265", "off", 5, 41),
])
def test_plain_decode_last_plan(profile, overlap, steps, tree):
    cfg = EngineConfig(page_size=1, pool_tokens=1 << 14, max_context=512, profile=profile, overlap=overlap)
    eng = Engine(cfg)
    eng.submit([Request(0, list(range(1, PROMPT + 1)), 5)])
    res = eng.run()
    assert res.verdict == "ok" and res.violations == {} and res.stats["leaked_pages"] == 0
    assert (res.stats["steps"], res.stats["tree_pages"]) == (steps, tree)
