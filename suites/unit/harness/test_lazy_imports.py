"""Imports sit at module top (ARCHITECTURE.md, "Harness layers"): a function imports only to
keep an optional package (an extra of pyproject.toml: torch, MLflow, matplotlib, pydantic,
numpy for the CI role, ...) off the import of its module, with a comment saying which.

The check reads harness/ and mini_engine/ with ``ast`` (nothing is imported). For every
module it works out which optional packages its top-level imports load, following the
project's own modules; an import inside a function passes only when its target loads an
optional package that the module does not already load, and its line or the line above
carries a comment naming one of those packages.
"""

from __future__ import annotations

import ast
import sys
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("harness", "mini_engine")

# Import names of what the extras install (pyproject.toml [project.optional-dependencies]):
# the base install is the standard library, so a command that does not need one of these
# must not load it. Spelling the comment may use instead of the import name.
OPTIONAL = {
    "torch": "torch", "numpy": "numpy", "safetensors": "safetensors", "triton": "triton",
    "mlflow": "mlflow", "psutil": "psutil", "pynvml": "nvml", "matplotlib": "matplotlib",
    "scipy": "scipy", "rich": "rich", "pytest": "pytest", "_pytest": "pytest", "xdist": "xdist",
    "pydantic": "pydantic", "yaml": "yaml", "playwright": "playwright", "sglang": "sglang",
    "transformers": "transformers", "hypothesis": "hypothesis", "jinja2": "jinja2",
}
# Submodules heavy enough to count apart from their package (torch's extension builder
# loads setuptools and a compiler toolchain's wrappers; torch itself does not).
HEAVY_SUBMODULES = {"torch.utils.cpp_extension": "cpp_extension"}
OPTIONAL.update(HEAVY_SUBMODULES)
# Third-party packages of the base install (imported anywhere, like the standard library).
BASE = {"tomli", "tomllib"}


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


MODULES = _modules()


@cache
def _tree(module: str) -> ast.Module:
    return ast.parse(MODULES[module].read_text(), filename=str(MODULES[module]))


def _targets(node: ast.Import | ast.ImportFrom, module: str) -> list[str]:
    """The modules an import statement loads (a ``from p import name`` also loads p.name
    when that is a module of ours or a heavy submodule)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    subs = [f"{base}.{alias.name}" for alias in node.names
            if f"{base}.{alias.name}" in MODULES or f"{base}.{alias.name}" in HEAVY_SUBMODULES]
    return [base, *subs]


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _top_imports(module: str) -> list[str]:
    """What importing ``module`` runs: its top-level imports (in if/try/class bodies too,
    not under ``if TYPE_CHECKING`` nor inside functions)."""
    found: list[str] = []

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.extend(_targets(node, module))
            elif isinstance(node, ast.If) and not _is_type_checking(node):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)
                visit(node.orelse)
                visit(node.finalbody)
            elif isinstance(node, (ast.With, ast.ClassDef)):
                visit(node.body)

    visit(_tree(module).body)
    return found


def _parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def loads(target: str, _seen: frozenset[str] = frozenset()) -> frozenset[str]:
    """The optional packages that importing ``target`` loads (its parent packages too)."""
    top = target.split(".")[0]
    for heavy in HEAVY_SUBMODULES:
        if target == heavy or target.startswith(heavy + "."):
            return frozenset({heavy})
    if top not in PACKAGES:
        return frozenset({top}) if top in OPTIONAL else frozenset()
    return _loads_ours(target, _seen)


@cache
def _loads_ours(target: str, _seen: frozenset[str]) -> frozenset[str]:
    out: set[str] = set()
    for module in _parents(target):
        if module not in MODULES or module in _seen:
            continue
        for imported in _top_imports(module):
            out |= loads(imported, _seen | {module})
    return frozenset(out)


def _functions(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def _comment(lines: list[str], lineno: int) -> str:
    """The comment on the import's line or on the line above."""
    here = lines[lineno - 1]
    above = lines[lineno - 2].strip() if lineno >= 2 else ""
    text = here.partition("#")[2] if "#" in here else ""
    if above.startswith("#"):
        text += " " + above
    return text.lower()


def problems() -> list[str]:
    found = []
    for module, path in MODULES.items():
        lines = path.read_text().splitlines()
        own = loads(module)
        seen: set[int] = set()
        for function in _functions(_tree(module)):
            for node in ast.walk(function):
                if not isinstance(node, (ast.Import, ast.ImportFrom)) or node.lineno in seen:
                    continue
                seen.add(node.lineno)
                where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{node.lineno}"
                targets = _targets(node, module)
                foreign = [t for t in targets if t.split(".")[0] not in (*PACKAGES, *OPTIONAL, *BASE)
                           and t.split(".")[0] not in sys.stdlib_module_names]
                if foreign:
                    found.append(f"{where}: {foreign[0]} is neither ours, the standard library nor "
                                 "a known extra's package (add it to OPTIONAL if an extra installs it)")
                    continue
                kept_out = set().union(*(loads(t) for t in targets)) - own
                if not kept_out:
                    found.append(f"{where}: import inside a function that loads nothing optional the "
                                 f"module does not already load; move it to module top")
                    continue
                comment = _comment(lines, node.lineno)
                if not any(OPTIONAL[name] in comment for name in kept_out):
                    found.append(f"{where}: a lazy import needs a comment naming what it keeps off the "
                                 f"module's import (one of {sorted(kept_out)})")
    return found


def test_imports_inside_functions_only_keep_an_optional_package_out():
    assert problems() == []


def test_the_check_finds_a_lazy_standard_library_import(tmp_path, monkeypatch):
    # A module with a function importing json (nothing optional) must be reported.
    path = ROOT / "harness" / "core" / "kv_units.py"
    text = path.read_text() + "\n\ndef _probe():\n    import json\n    return json\n"
    module = "harness.core.kv_units"
    _tree.cache_clear()
    monkeypatch.setitem(MODULES, module, tmp_path / "kv_units.py")
    (tmp_path / "kv_units.py").write_text(text)
    try:
        assert any("kv_units.py" in p and "move it to module top" in p for p in problems())
    finally:
        _tree.cache_clear()


def test_the_check_wants_a_comment_on_a_lazy_optional_import(tmp_path, monkeypatch):
    path = ROOT / "harness" / "core" / "kv_units.py"
    module = "harness.core.kv_units"
    _tree.cache_clear()
    monkeypatch.setitem(MODULES, module, tmp_path / "kv_units.py")
    (tmp_path / "kv_units.py").write_text(path.read_text() + "\n\ndef _probe():\n    import mlflow\n    return mlflow\n")
    try:
        assert any("kv_units.py" in p and "needs a comment" in p for p in problems())
        (tmp_path / "kv_units.py").write_text(
            path.read_text() + "\n\ndef _probe():\n    import mlflow  # mlflow: only this probe logs\n    return mlflow\n")
        _tree.cache_clear()
        assert not any("kv_units.py" in p for p in problems())
    finally:
        _tree.cache_clear()


def test_loads_follows_our_modules_to_the_optional_package():
    # The engine's model loads torch; the harness's CLI module loads nothing optional.
    assert "torch" in loads("mini_engine.model.backend")
    assert loads("harness.cli") == frozenset()


def test_building_the_parser_loads_nothing_optional():
    # harness.cli imports every command module (by name, which the check above cannot
    # follow) to build the parser: each must load no extra's package at its top, or a
    # bare install's `kvbench --help` (and the CI role's `kvbench bot`) would fail.
    commands = [m for m in MODULES if m.startswith("harness.commands.")]
    assert commands
    assert {m: sorted(loads(m)) for m in commands if loads(m)} == {}
