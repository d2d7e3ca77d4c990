"""Three recorded nights of a small real grid, with planted moves, for history and report tests.

One real in-process sweep gives the rows; the nights are copies of it with their own
commit and start time (as the nightly keeps them) and these changes planted:
  night 2 (commit C2): config REGRESSED holds one more page (peak_pages_held +1), and keeps it;
  night 3 (commit C3): config SLOWER's wall_s samples are 30% slower (a timing regression).
Directory names sort against time on purpose: nights are ordered by meta.json's start.
"""

from __future__ import annotations

import copy
from pathlib import Path

from harness.grid.execute import GridSession
from harness.grid.suites import load_suite
from harness.store.results import RunDir, append_row, load_rows

SUITE = """
name = "nightsuite"
[defaults]
spec = "dflash"
num_requests = 6
input_len = 64
output_len = 32
pool_tokens = 4096
[axes]
policy = ["aligned", "unaligned"]
page_size = [1, 16]
block_size = [4, 16]
[[expect]]
when = { policy = "unaligned" }
status = ["ok", "violated", "pool_exhausted"]
"""
C1, C2, C3 = "1" * 40, "2" * 40, "3" * 40
REGRESSED = "policy:aligned-ps:16-bs:16"
SLOWER = "policy:aligned-ps:1-bs:4"
NAMES = ("night-c", "night-b", "night-a")  # reverse of their time order


def record(tmp: Path, nights_dir: Path) -> list[RunDir]:
    suite_file = tmp / "nightsuite.toml"
    suite_file.write_text(SUITE)
    src = RunDir(tmp / "src")
    src.path.mkdir(parents=True)
    src.write_meta({"suite": "nightsuite", "hardware": {"profile": "cpu"}})
    session = GridSession(load_suite(suite_file), src)
    for gc in session.suite.configs:
        session.run(gc)
    rows = load_rows(src.path)
    assert {r["test_id"] for r in rows} >= {REGRESSED, SLOWER}
    out = []
    for i, (name, commit) in enumerate(zip(NAMES, (C1, C2, C3))):
        night = RunDir(nights_dir / name)
        night.path.mkdir(parents=True)
        night.write_meta({"suite": "nightsuite", "git_commit": commit, "created": 1_790_000_000 + 86400 * i,
                          "hardware": {"profile": "cpu"}, "mlflow_parent": f"{i + 1}" * 32, "mlflow_experiment": "3",
                          "mlflow_uri": "http://mlflow.example:5000"})
        for row in copy.deepcopy(rows):
            if row["test_id"] == REGRESSED and i >= 1:
                row["metrics"]["peak_pages_held"] += 1
            base = 1.0 if not (row["test_id"] == SLOWER and i == 2) else 1.3
            row["samples"] = {"wall_s": [base + 0.001 * k for k in range(5)]}
            row["metrics"]["wall_s"] = base + 0.002
            append_row(night.results, row)
        out.append(night)
    return out
