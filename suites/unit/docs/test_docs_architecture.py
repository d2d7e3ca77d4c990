"""ARCHITECTURE.md's module map is the folders' own: generated from each module's docstring
by scripts/module_map.py, so a module moved, added or re-described without re-running the
script fails here, and so does one the map does not name (24 of 184 were missing when the
map was written by hand)."""

from __future__ import annotations

import re

from scripts_loader import ROOT, load_script

mm = load_script("module_map")


def checked_in() -> str:
    return mm.current((ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8"))


def test_the_checked_in_module_map_is_what_the_script_writes():
    section = checked_in()
    assert section, "ARCHITECTURE.md lost its module-map markers"
    assert section == mm.render(), "ARCHITECTURE.md's module map is stale: run python scripts/module_map.py"


def test_every_module_of_both_packages_is_named_in_its_package_table():
    named, package = set(), None
    for line in checked_in().splitlines():
        if m := re.match(r"### `(.+)/`$", line):
            package = m[1]
        elif m := re.match(r"\| `([\w.]+\.py)` \|", line):
            named.add(f"{package}/{m[1]}")
        elif line.startswith("### "):
            package = None
    on_disk = {f.relative_to(ROOT).as_posix() for f in mm.modules() if f.name != "__init__.py"}
    assert on_disk - named == set(), "modules the map does not name"
    assert named - on_disk == set(), "the map names modules that are gone"


def test_a_summary_is_the_first_sentence_even_when_it_wraps(tmp_path):
    f = tmp_path / "m.py"
    f.write_text('"""The first sentence wraps\nonto a second line. The second sentence is left out.\n\nDetails."""\n')
    assert mm.summary(f) == "The first sentence wraps onto a second line."


def test_a_module_without_a_docstring_says_so_plainly(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("x = 1\n")
    assert mm.summary(f) == mm.NO_DOCSTRING


def test_the_write_keeps_the_prose_around_the_markers(tmp_path):
    root = tmp_path / "repo"
    (root / "mini_engine").mkdir(parents=True)
    (root / "harness").mkdir()
    (root / "mini_engine" / "__init__.py").write_text('"""The engine."""\n')
    (root / "mini_engine" / "step.py").write_text('"""One step: admit, then decode."""\n')
    (root / "harness" / "__init__.py").write_text("")
    doc = root / "ARCHITECTURE.md"
    doc.write_text(f"before\n{mm.BEGIN}\nold\n{mm.END}\nafter\n")
    assert mm.write(doc, root) and not mm.write(doc, root)  # changed once, then up to date
    text = doc.read_text()
    assert text.startswith("before\n") and text.endswith("after\n")
    assert "| `step.py` | One step: admit, then decode. |" in text and "### `harness/`" in text
