"""Short, distinct MLflow run names (harness/core/run_names.py)."""

from __future__ import annotations

import pytest

from harness.core.run_names import short_name
from harness.grid.suites import load_suite


def test_the_axes_that_tell_configs_apart_come_first_without_option_names():
    assert short_name("spec:dflash-bs:16-profile:sglang-0.5.23-ps:16-window:none") == "dflash ps16 bs16 0.5.23 nowin"
    assert short_name("spec:eagle-topk:1-steps:3-profile:sglang-pre-35265-ps:64-window:64") == \
        "eagle ps64 topk1 steps3 pre-35265 w64"
    assert short_name("spec:dflash-bs:4-model:tiny-ps:16") == "dflash ps16 bs4 model=tiny"
    assert short_name("odd") == "odd"


@pytest.mark.parametrize("suite", ["smoke", "invariants", "nightly-gpu"])
def test_every_committed_suite_gets_distinct_names_shorter_than_its_ids(suite):
    ids = [c.id for c in load_suite(suite, validate=False).configs]
    names = [short_name(i) for i in ids]
    assert len(set(names)) == len(ids)
    assert all(len(n) < len(i) for n, i in zip(names, ids))
    # the page size is within MLflow's cut of the name column, not behind it
    assert all(" ps" in n[:12] for n in names)
