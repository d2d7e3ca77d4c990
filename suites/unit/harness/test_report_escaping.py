"""The HTML report escapes what a run names: config options, test ids, statuses, commits,
suite and run names come from config files, pull requests and run directories, and a
``<script>`` among them must reach the page as text (harness/view/templating.py)."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

from harness.judge import history
from harness.view import report, templating

HOSTILE = "<script>alert(1)</script><img src=x onerror=alert(2)>\"' onmouseover='alert(3)&amp;"
# Every element the report writes itself; a hostile name must add none (no script, no img).
OURS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "span", "code", "a", "table",
        "thead", "tbody", "tr", "th", "td", "ul", "li", "section", "div", "figure", "figcaption", "svg", "rect",
        "line", "text", "polyline", "circle", "g", "title"}


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.attrs: list[tuple[str, str | None]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.attrs += attrs

    def handle_data(self, data):
        self.text.append(data)


def night(tmp_path: Path, i: int, held: int) -> history.Night:
    cfg = {"spec": HOSTILE, "page_size": 16, "block_size": 16, "model": "none", "seed": 1}
    row = {"key": "k1", "test_id": f"{HOSTILE}-id", "config": cfg, "status": "ok", "verdict": HOSTILE,
           "metrics": {"peak_tokens_held": held, "peak_pages_held": held // 16}}
    meta = {"suite": HOSTILE, "git_commit": f"{HOSTILE}{i}", "created": 1_790_000_000 + i}
    return history.Night(tmp_path / f"{HOSTILE}{i}", meta, [row])


def test_a_hostile_name_is_text_on_the_page_never_markup(tmp_path: Path):
    hist = history.build([night(tmp_path, 0, 1888), night(tmp_path, 1, 2240)])  # a move: every section names it
    html, _ = report.page(hist, metrics=["peak_tokens_held"], configs=None, heat_metric="peak_tokens_held")
    parsed = Page()
    parsed.feed(html)
    assert parsed.tags <= OURS, parsed.tags - OURS
    assert not [name for name, _ in parsed.attrs if name.startswith("on")]
    assert "<script" not in html.lower() and "<img" not in html.lower()
    text = "".join(parsed.text)
    # The names are there as written (the '&amp;' too): suite, run, config in the index, its view,
    # the moves and the compare, the verdict among the runs' counts, the commit as a cell's title.
    assert text.count(f"kvbench report: {HOSTILE}") == 2 and f"{HOSTILE}1" in text
    assert text.count(f"{HOSTILE}-id") >= 4 and f"1 {HOSTILE}" in text
    assert ("title", f"{HOSTILE}1") in parsed.attrs


def test_templates_insert_raw_markup_only_from_our_own_builders():
    """``|safe`` only on a chart (``svg``, escaped by report_svg) or a section rendered
    here (``*_html``): a run's text can never be passed through unescaped by a template."""
    folder = Path(templating.__file__).parent / "templates" / "report"
    found = []
    for template in sorted(folder.glob("*.html")):
        source = template.read_text()
        uses = re.findall(r"\{\{\s*([\w.]+)\s*\|\s*safe\s*\}\}", source)
        assert len(uses) == source.count("safe"), f"{template.name}: a |safe this check cannot read"
        found += [(template.name, name) for name in uses
                  if not (name.split(".")[-1] == "svg" or name.endswith("_html"))]
    assert found == []
    assert templating.environment().autoescape is True
