"""No import circle inside mini_engine.memory: its parts import one way (pool and audit's
record at the bottom, then tables, extents and tree, then the manager; trace below the
tree, replay above it).

The graph is read from the source with ast: every import a module runs, at its top or
inside a function. Imports under ``if TYPE_CHECKING:`` are left out: they are
annotations only (audit's checks name the KVManager they check, the SWA tree's lock and
eviction functions the tree they work on) and never run. A circle was once closed by an
import at the bottom of a file; that is what this keeps out.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = "mini_engine.memory"


def modules() -> dict[str, Path]:
    out = {}
    for path in (ROOT / "mini_engine" / "memory").rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def run_time_imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The memory modules ``name`` imports when it runs (TYPE_CHECKING blocks skipped)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import):
                targets = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom) and child.module and not child.level:
                targets = [child.module] + [f"{child.module}.{a.name}" for a in child.names]
            else:
                visit(child)
                continue
            for target in targets:
                while target and target not in known:
                    target = target.rpartition(".")[0]
                if target.startswith(PACKAGE) and target != name:
                    found.add(target)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def circle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle of the graph, as the modules along it; [] when there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def walk(m: str) -> list[str]:
        state[m] = 1
        path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return path[path.index(n):] + [n]
            if n not in state and (found := walk(n)):
                return found
        state[m] = 2
        path.pop()
        return []

    for m in sorted(graph):
        if m not in state and (found := walk(m)):
            return found
    return []


def test_the_memory_layer_has_no_import_circle():
    known = modules()
    graph = {name: run_time_imports(name, path, known) for name, path in known.items()}
    assert sum(map(len, graph.values())) > 50, "the walk found too few imports to mean anything"
    assert circle(graph) == []


def test_the_check_finds_a_circle():
    assert circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert circle({"a": {"b"}, "b": set()}) == []
