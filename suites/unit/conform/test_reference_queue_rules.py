"""Two rules of SGLang 0.5.23's waiting queue in the mini engine, side by side with its own
loop on workloads held out from the invariants suite (whose configs found them; kvbench
conform --engine --suite invariants checks those in the nightly):

* the waiting-prefix refresh (mini_engine/scheduler/prefix_refresh.py): every 32nd pass
  SGLang touches the waiting requests' cached prefixes, so under pool pressure LRU
  eviction keeps other pages;
* a retracted request waits at the back of the queue, in retraction order
  (Scheduler.retract, Profile.requeue_back).

Each workload is equal on every step with the rule and differs without it (the profile
with that one rule switched off), so it is the rule that makes them equal.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from harness.reference.compare import compare, describe
from mini_engine.config import profiles

BASE = {"workload": "uniform", "input_len": 128, "min_len": 16, "output_len": 64}
# Plain sessions over 2 shared prompts on a hybrid SWA model, a 1024-token pool.
SESSIONS = {**BASE, "spec": "none", "window": 32, "page_size": 16, "shared_prefix": 64, "prefix_groups": 2,
            "turns": 3, "num_requests": 12, "pool_tokens": 1024, "seed": 5}
# EAGLE topk 4 at ps 256: many requests retracted at once, then re-admitted in queue order.
RETRACTING = {**BASE, "spec": "eagle", "topk": 4, "steps": 3, "num_draft_tokens": 8, "page_size": 256,
              "num_requests": 10, "pool_tokens": 16384, "seed": 5}


@pytest.mark.parametrize("config, rule, steps, differs_at", [
    (SESSIONS, "waiting_prefix_refresh", 560, (64, "used", 62, 63)),
    (RETRACTING, "requeue_back", 88, (49, "running", 6, 5)),
])
def test_held_out_equal_on_every_step(reference, monkeypatch, config, rule, steps, differs_at):
    c = compare(config)
    assert c.equal, describe(c)
    assert c.theirs["steps"] == steps
    monkeypatch.setitem(profiles.PROFILES, "sglang-0.5.23", replace(profiles.PROFILES["sglang-0.5.23"], **{rule: False}))
    without = compare(config)
    assert without.first_step == differs_at, describe(without)
