"""The engine's shape: no function of mini_engine/ is over 80 lines, and its top level keeps
at most ten modules. A function over 80 lines mixes rules that read apart
(Scheduler._admit was 130 lines with three admission policies behind flags before they
became one interface, mini_engine/scheduler/admission.py). Read with ast, so the whole
package is walked, the model's torch code too, without importing it."""

from __future__ import annotations

import ast
from pathlib import Path

import mini_engine

LIMIT = 80
ROOT = Path(mini_engine.__file__).resolve().parent
# path under mini_engine/ :: qualified name -> its length when allowed (none left)
def function_lengths(root: Path = ROOT) -> dict[str, int]:
    """Every function and method under ``root``, by path::qualified name, with its line count."""
    out: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()

        def walk(node: ast.AST, prefix: str) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    name = f"{prefix}{child.name}"
                    if not isinstance(child, ast.ClassDef):
                        out[f"{rel}::{name}"] = child.end_lineno - child.lineno + 1
                    walk(child, name + ".")
                else:
                    walk(child, prefix)

        walk(ast.parse(path.read_text(encoding="utf-8")), "")
    return out


def test_no_function_is_over_the_limit():
    lengths = function_lengths()
    assert len(lengths) > 500  # the walk reached the package (an empty walk would pass anything)
    long = {name: n for name, n in lengths.items() if n > LIMIT}
    assert long == {}, f"functions over {LIMIT} lines: split them"


def test_the_top_level_keeps_at_most_ten_modules():
    # The step's modules live in its folders (config/, scheduler/, prefill/, decode/,
    # forward/); the top level keeps the engine and what every part shares.
    top = sorted(p.name for p in ROOT.glob("*.py"))
    assert len(top) <= 10, top


def test_the_walk_counts_methods_and_nested_functions(tmp_path):
    (tmp_path / "m.py").write_text("class A:\n    def f(self):\n        def g():\n            pass\n        return 1\n")
    assert function_lengths(tmp_path) == {"m.py::A.f": 4, "m.py::A.f.g": 2}
