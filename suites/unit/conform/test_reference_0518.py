"""The reference engine on SGLang 0.5.18's own loop, beside the sglang-pre-35265 profile.

Skipped unless SGLang 0.5.18 is the installed release (CI's 0.5.18 venv runs it, with
KVBENCH_REQUIRE_SGLANG=0.5.18 turning the skip into a failure). The hooks that differ
from 0.5.23 are the loop's: arrivals through a request receiver, no
_reqs_finishing_inflight, the result processor's arguments, the Req's field names
(harness/reference/req_fields.py). Before the mini engine followed 0.5.18's last-verify
rules (docs/reference.md) the first config gave steps 94 against 95, the third tree 117
against 120, the fourth 1960 against 2004.
"""

from __future__ import annotations

import pytest

from harness.core.run_spec import RunSpec
from harness.reference import loader
from harness.reference.compare import compare, describe
from harness.reference.run import UnsupportedByReference, check_supported

BASE = {"profile": "sglang-pre-35265", "workload": "uniform", "num_requests": 12, "input_len": 160, "min_len": 40,
        "output_len": 96, "seed": 7, "pool_tokens": 8192}


@pytest.fixture(scope="module")
def reference0518(sg0518, sg_serving):
    return loader.load()


@pytest.mark.parametrize("extra", [
    {},  # plain decoding, overlap on: every running request planned, the last batch processed a step later
    {"overlap": False},
    {"spec": "dflash", "block_size": 16, "overlap": False},  # the whole run keyed into the tree
    {"spec": "dflash", "block_size": 16, "page_size": 1, "window": 64},
    {"spec": "eagle", "topk": 1, "steps": 3},
    # batch_is_full cleared by 0.5.18's update_running_batch, after the pass (the invariants
    # suite's memory pressure: the mini engine admitted at step 10, SGLang at 11)
    {"spec": "eagle", "topk": 1, "steps": 3, "page_size": 64, "num_requests": 16, "input_len": 128, "min_len": 16,
     "output_len": 64, "seed": 11, "pool_tokens": 1024},
    # test_batch_full's worked example: B joins at step 102 (0.5.23: 101)
    {"spec": "none", "workload": "fixed", "num_requests": 2, "input_len": 64, "output_len": 100, "pool_tokens": 256,
     "chunked_prefill": 256, "prefix_cache": "chunk"},
])
def test_pre_35265_equal_on_every_step(reference0518, extra):
    assert reference0518.version == "0.5.18"
    c = compare({**BASE, **extra})
    assert c.equal, describe(c)


def test_the_0523_profile_is_refused_on_0518(reference0518):
    spec = RunSpec.parse({**BASE, "profile": "sglang-0.5.23"})
    with pytest.raises(UnsupportedByReference, match=r"SGLang 0\.5\.18's own loop: --profile sglang-pre-35265"):
        check_supported(spec.engine, spec.workload.to_dict(), loader.target())


def test_0518_retraction_equal_on_every_step(reference0518):
    # The invariants suite's EAGLE topk 4 at ps 256 (87 retractions). 0.5.18's
    # update_running_batch hands self.server_args to retract_decode: before the stand-in
    # scheduler carried them, every config that retracted failed there (AttributeError
    # 'server_args'). Then the mini engine differed from step 15 (running 9 against 3): it
    # put retracted requests back at the front of the waiting queue, reversed; 0.5.18
    # appends them in retraction order and its fcfs policy never sorts (Profile.requeue).
    c = compare({"profile": "sglang-pre-35265", "workload": "uniform", "num_requests": 10, "input_len": 128,
                 "min_len": 16, "output_len": 64, "seed": 11, "spec": "eagle", "topk": 4, "steps": 3,
                 "num_draft_tokens": 8, "page_size": 256, "pool_tokens": 16384})
    assert c.equal, describe(c)
    assert c.theirs["retractions"] > 0
