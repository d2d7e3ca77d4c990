"""The numbers the README and docs state are the code's: grid sizes, the workflow count,
every workflow in docs/ci.md's table (they drifted: 324 vs 355 configs, four vs five)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.grid.suites import load_suite

ROOT = Path(__file__).resolve().parents[3]
DOCS = {name: (ROOT / name).read_text() for name in ("README.md", "docs/harness.md", "docs/ci.md")}
WORDS = {"three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8}


@pytest.mark.parametrize("suite", ["smoke", "invariants", "nightly-gpu"])
def test_every_config_count_stated_for_a_suite_is_its_grid_size(suite):
    size = len(load_suite(suite, validate=False).configs)
    stated = [(doc, int(n)) for doc, text in DOCS.items()
              for line in text.splitlines() if re.search(rf"kvbench sweep {suite}\b", line)
              for n in re.findall(r"\b(\d+) configs\b", line)]
    assert all(n == size for _, n in stated), (suite, size, stated)
    if suite != "nightly-gpu":
        assert stated, f"no config count of {suite} is stated any more: drop this case"


def test_the_workflow_count_and_table_match_ci_workflows():
    files = sorted(p.name for p in (ROOT / "ci" / "workflows").glob("*.yml"))
    for doc, text in DOCS.items():
        for word in re.findall(r"\b(\w+) GitHub Actions workflows", text):
            assert WORDS.get(word.lower()) == len(files), (doc, word, files)
    table = {m for m in re.findall(r"^\| `([\w-]+\.yml)` \|", DOCS["docs/ci.md"], re.M)}
    assert table == set(files)
