"""Compile named functions of an installed SGLang module from its source, without importing it.

Several of SGLang's rules live in modules whose imports need a GPU stack (the scheduler,
schedule_batch, the disaggregation queues). The side-by-side tests read the module's
source, keep only the named top-level functions or methods of one class, drop their
decorators, and compile them into a namespace the test fills with what they use. A
rule that SGLang renames or removes fails the test loudly, not silently.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from harness.conform.sglang_radix import compile_classes


def _compile(module: str, nodes: list, names: set[str], where: str, namespace: dict) -> dict:
    body = [n for n in nodes if isinstance(n, ast.FunctionDef) and n.name in names]
    assert {n.name for n in body} == names, f"{where} no longer defines {names}"
    for n in body:
        n.decorator_list = []
    origin = importlib.util.find_spec(module).origin
    exec(compile(ast.Module(body=body, type_ignores=[]), origin, "exec"), namespace)
    return namespace


def source(module: str) -> ast.Module:
    return ast.parse(Path(importlib.util.find_spec(module).origin).read_text())


def functions(module: str, names: set[str], namespace: dict) -> dict:
    """The named top-level functions of ``module``, compiled into ``namespace``."""
    return _compile(module, source(module).body, names, module, namespace)


def methods(module: str, cls: str, names: set[str], namespace: dict) -> dict:
    """The named methods of class ``cls`` of ``module``, as plain functions in ``namespace``."""
    klass = next(n for n in source(module).body if isinstance(n, ast.ClassDef) and n.name == cls)
    return _compile(module, klass.body, names, f"{module}.{cls}", namespace)


# The named top-level classes of a module, compiled (harness/conform/sglang_radix.py, where conform needs it too).
classes = compile_classes


def assigned(module: str, where: str, target: str):
    """The right-hand side of ``target = ...`` inside function ``where`` ("f" or "Class.f") of
    ``module``, as a function of a dict of the names it reads. For a rule written inline
    in a method too heavy to run (a GPU batch around one line of arithmetic)."""
    body = source(module).body
    for part in where.split("."):
        node = next((n for n in body if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == part), None)
        assert node is not None, f"{module} no longer defines {where}"
        body = node.body
    hits = [n.value for n in ast.walk(node) if isinstance(n, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == target for t in n.targets)]
    assert len(hits) == 1, f"{module}.{where} assigns {target} {len(hits)} times (expected once)"
    code = compile(ast.Expression(hits[0]), importlib.util.find_spec(module).origin, "eval")
    return lambda names: eval(code, {"max": max, "min": min, "int": int}, dict(names))
