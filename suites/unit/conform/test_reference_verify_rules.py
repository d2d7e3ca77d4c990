"""SGLang 0.5.23's two rules at a speculative request's last verify, side by side with its
own loop under overlap (its default): the tree keeps prompt + max_new_tokens after an
overshooting finish, and a batch launched for a request whose in-flight verify finishes
it has its result processed one iteration later (mini_engine/decode/verify_commit.py,
Profile.launch_finished; worked numbers: suites/unit/engine/test_verify_overshoot.py).
Workloads held out from the smoke suite (kvbench conform --engine --suite smoke checks
that one in CI); before these rules the mini engine gave tree 1052 and 14 steps on the
first, 58 and 22 on the second.
"""

from __future__ import annotations

import pytest

from harness.reference.compare import compare, describe

HELD_OUT = {"workload": "uniform", "num_requests": 10, "input_len": 96, "min_len": 24, "output_len": 72,
            "seed": 3, "pool_tokens": 8192}


@pytest.mark.parametrize("spec, steps, tree", [
    ({"spec": "dflash", "block_size": 16, "page_size": 1}, 15, 1062),
    ({"spec": "eagle", "topk": 1, "steps": 3, "page_size": 16}, 23, 59),
])
def test_last_verify_equal_on_every_step_under_overlap(reference, spec, steps, tree):
    c = compare({**HELD_OUT, **spec})
    assert (c.theirs["steps"], c.theirs["tree_pages"]) == (steps, tree)
    assert c.equal, describe(c)
