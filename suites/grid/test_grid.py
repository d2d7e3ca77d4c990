"""Each config of the chosen suite grid is one test (see conftest.py for options).

Rerun one config by its id, e.g.
  pytest 'suites/grid/test_grid.py::test_config[spec:dflash-bs:16-profile:sglang-pre-35265-ps:16-window:none]'
"""

from __future__ import annotations

from harness.judge.expect import PASSING


def test_config(grid_config, kvbench_grid):
    row = kvbench_grid.run(grid_config)
    assert row["verdict"] in PASSING, f"{grid_config.id}: {row['verdict']}: " + "; ".join(row["reasons"])
