"""docs/rules.md cannot rot: every function it names imports (module, then attributes),
every test it names is a top-level name of its test file, and its invariant table holds
exactly the ids the harness counts (K1-K14) and DESIGN.md's catalogue lists."""

from __future__ import annotations

import ast
import importlib
import re
from functools import cache

import pytest

from harness.core.metrics import INVARIANTS
from scripts_loader import ROOT

PAGE = (ROOT / "docs" / "rules.md").read_text(encoding="utf-8")
ROWS = [[c.strip() for c in line.strip().strip("|").split("|")] for line in PAGE.splitlines()
        if line.startswith("| ") and not line.startswith(("| id |", "| rule |"))]
CODE = sorted({ref for row in ROWS for ref in re.findall(r"`([\w.]+)`", row[-2])})
TESTS = sorted({ref for row in ROWS for ref in re.findall(r"`([\w/.-]+\.py::\w+)`", row[-1])})


def resolve(path: str):
    """The object a dotted path names: the longest importable module, then attributes."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(path)


@cache
def top_level_names(file: str) -> set[str]:
    tree = ast.parse((ROOT / file).read_text(encoding="utf-8"))
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def test_every_row_names_code_and_a_test():
    assert ROWS and all(re.search(r"`[\w.]+`", r[-2]) and "::" in r[-1] for r in ROWS), \
        [r[0] for r in ROWS if "::" not in r[-1]]


@pytest.mark.parametrize("path", CODE)
def test_the_code_named_exists(path):
    assert callable(resolve(path)), f"docs/rules.md names {path}, which is no function or class"


@pytest.mark.parametrize("ref", TESTS)
def test_the_test_named_exists(ref):
    file, name = ref.split("::")
    assert (ROOT / file).is_file(), f"docs/rules.md names {file}, which is gone"
    assert name in top_level_names(file), f"docs/rules.md names {ref}, which {file} does not define"


def test_the_invariant_table_is_the_catalogue():
    ids = [r[0] for r in ROWS if re.fullmatch(r"K\d+", r[0])]
    design = re.findall(r"^\| (K\d+) \|", (ROOT / "docs" / "DESIGN.md").read_text(encoding="utf-8"), re.M)
    assert ids == list(INVARIANTS) == design
