"""Every relative link of the README, ARCHITECTURE.md and docs/*.md reaches a file or a
folder of the checkout: reference material moved to docs/ once, and a link left behind
by a move, a rename or a page not written yet fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scripts_loader import ROOT

PAGES = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def relative_links(text: str) -> list[str]:
    """The link targets outside code blocks that name a path, without their #anchor."""
    targets = LINK.findall(FENCE.sub("", text))
    return [t.split("#", 1)[0] for t in targets
            if not re.match(r"[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def test_links_are_found_in_prose_and_not_in_code_or_urls():
    text = "see [a](docs/a.md#x), [b](https://x.org/b.md), [c](#top)\n```\n[d](gone.md)\n```\n"
    assert relative_links(text) == ["docs/a.md"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_reaches_a_file(page: Path):
    missing = [t for t in relative_links(page.read_text(encoding="utf-8")) if not (page.parent / t).exists()]
    assert missing == [], f"{page.relative_to(ROOT)} links to what is not there"


def test_the_readme_links_the_reference_pages():
    linked = {(ROOT / t).resolve() for t in relative_links((ROOT / "README.md").read_text(encoding="utf-8"))}
    assert {p.resolve() for p in (ROOT / "docs").glob("*.md")} <= linked, "a docs page the README does not reach"


REPO_PATH = re.compile(r"(?<![\w/.-])((?:mini_engine|harness|suites|scripts|ci|docs|examples)/[\w/.-]*[\w/])")


def repo_paths(text: str) -> set[str]:
    """Paths into the checkout that prose names (`mini_engine/memory/sizing.py`), outside code blocks."""
    return set(REPO_PATH.findall(FENCE.sub("", text)))


def test_repo_paths_are_found_in_prose_only():
    assert repo_paths("see `harness/core/metrics.py` and mini_engine/memory/\n```\nscripts/gone.py\n```\n") == {
        "harness/core/metrics.py", "mini_engine/memory/"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_module_or_folder_the_prose_names_exists(page: Path):
    """A module moved without its docs: the page still sends a reader to the old place."""
    missing = sorted(p for p in repo_paths(page.read_text(encoding="utf-8")) if not (ROOT / p).exists())
    assert missing == [], f"{page.relative_to(ROOT)} names paths that are gone"
