"""``kvbench conform --engine --suite S --report FILE``: the comparisons as JSON, for triage.

One object: the suite, the SGLang release the reference ran, every compared config
(its suite id, its key, whether it is equal, and where not: the first differing step
with its quantity and both values, the totals that differ, both step counts, or the
reference's error) and the configs not run, counted by reason. ``kvbench ci
reference-triage`` reads it (harness/ci/reference_triage.py).
"""

from __future__ import annotations

import json
from typing import Any

from harness.core.safe_write import replacing
from harness.reference.compare import Comparison

FORMAT = "kvbench-reference-report"


def finding(cid: str, c: Comparison) -> dict[str, Any]:
    first = None
    if c.first_step is not None:
        step, quantity, mine, theirs = c.first_step
        first = {"step": step, "quantity": quantity, "mini": mine, "sglang": theirs}
    return {"id": cid, "key": c.key, "equal": c.equal, "error": c.error, "first_step": first,
            "totals": [{"metric": m, "mini": a, "sglang": b} for m, a, b in c.totals],
            "steps": {"mini": c.steps[0], "sglang": c.steps[1]}}


def write(path: str, suite: str, version: str, findings: list[dict[str, Any]], not_run: dict[str, int]) -> None:
    doc = {"format": FORMAT, "suite": suite, "sglang_version": version, "configs": findings, "not_run": not_run}
    with replacing(path, "--report") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
