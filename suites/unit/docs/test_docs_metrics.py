"""docs/metrics.md is the metric schema's own table (scripts/metrics_page.py writes it from
harness/core/metrics.py): a figure declared, renamed or re-described without re-running
the script fails here."""

from __future__ import annotations

from harness.core.metrics import METRICS, SERIES
from scripts_loader import ROOT, load_script

page = load_script("metrics_page")


def test_the_checked_in_metrics_page_is_what_the_script_writes():
    text = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    assert text == page.render(), "docs/metrics.md is stale: run python scripts/metrics_page.py"


def test_every_declared_figure_has_one_row():
    text = page.render()
    for name in [*METRICS, *SERIES]:
        assert text.count(f"| `{name}` |") == 1, name
