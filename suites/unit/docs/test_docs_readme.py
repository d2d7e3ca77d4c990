"""The README stays a five-minute read (it was 25,000 characters: reference material
went to docs/), and the figures of its headline table are the checked-in baseline's
for the main job's configs it names, so they cannot drift from what a newcomer's
`kvbench sweep smoke` shows."""

from __future__ import annotations

import json
import re

from harness.core.options import config_key, resolved_defaults
from harness.grid.suites import load_suite
from scripts_loader import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
COLUMNS = ("stranded_slots_sum", "peak_stranded_slots_spec", "leaked_tokens")


def test_the_readme_is_at_most_8000_characters():
    assert len(README) <= 8000, f"README.md is {len(README)} characters; move reference material to docs/"


def headline_rows() -> dict[str, list[int]]:
    rows = re.findall(r"^\| `([\w.-]+)`[^|]* \| ([\d,]+) \| ([\d,]+) \| ([\d,]+) \|$", README, re.M)
    return {p: [int(n.replace(",", "")) for n in ns] for p, *ns in rows}


def baseline_counters(config: dict) -> dict:
    """The cpu baseline's counters of a suite config, by its result key."""
    entries = json.loads((ROOT / "results" / "baselines" / "cpu.json").read_text())["configs"]
    return entries[config_key({**resolved_defaults(), **config})]["counters"]


def test_the_headline_table_is_the_baselines_figures_for_the_main_jobs_configs():
    rows = headline_rows()
    assert set(rows) == {"sglang-pre-35265", "sglang-0.5.23", "host-aligned", "floor-free"}
    smoke = {gc.id: gc.config for gc in load_suite("smoke", validate=False).configs}
    for profile, figures in rows.items():
        config = smoke[f"spec:dflash-bs:16-profile:{profile}-ps:16-window:none"]
        counters = baseline_counters(config)
        assert figures == [counters[c] for c in COLUMNS], (profile, figures)
