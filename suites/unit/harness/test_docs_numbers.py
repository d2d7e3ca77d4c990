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


def test_the_trace_counts_docs_conform_states_are_the_suites():
    """docs/conform.md's trace counts per release are scripts/conform_suites.py's selection."""
    import importlib.util
    from collections import Counter

    spec = importlib.util.spec_from_file_location("conform_suites_under_test", ROOT / "scripts" / "conform_suites.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    counts = Counter(v for *_, v in mod.accounting_configs(["smoke", "invariants"]))
    text = (ROOT / "docs" / "conform.md").read_text()
    stated = {v: int(n) for n, v in re.findall(r"# (\d+) traces in conform-traces for SGLang ([\d.]+)", text)}
    assert stated == dict(counts), (stated, counts)
    prose = re.search(r"The (\d+) pre-35265 traces of the smoke and invariants suites conform\s+on 0\.5\.18, "
                      r"and their (\d+) other traces on 0\.5\.23", text)
    assert prose and (int(prose[1]), int(prose[2])) == (counts["0.5.18"], counts["0.5.23"])
