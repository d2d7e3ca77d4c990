"""Static facts about a test file, read with ``ast``: its tests and its runner marks.

The bot reads test files from pull requests it does not trust, so it never imports
them: parsing is enough to know which tests exist and which runner they ask for.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field
from pathlib import Path

from harness.ci.text import show
from harness.core.errors import UsageError
from mini_engine.files import failure, read_document

MAX_FILE_BYTES = 1 << 20  # a test file larger than this is not a test file we will parse
WHAT = "test file"  # what a failure to read or parse one calls it


@dataclass
class TestInfo:
    path: str
    module_runner: str | None = None
    module_gpu: bool = False
    functions: dict[str, str | None] = field(default_factory=dict)  # name -> runner mark
    classes: dict[str, str | None] = field(default_factory=dict)  # name -> runner mark
    methods: dict[str, dict[str, str | None]] = field(default_factory=dict)  # class -> name -> mark

    def has(self, test: str) -> bool:
        """``test`` is ``func``, ``Class`` or ``Class::method``."""
        cls, _, meth = test.partition("::")
        if not meth:
            return cls in self.functions or cls in self.classes
        return meth in self.methods.get(cls, {})

    def tests(self) -> list[str]:
        """Every test of the file as ``func`` or ``Class::method``, in file order."""
        return [*self.functions, *(f"{c}::{m}" for c, methods in self.methods.items() for m in methods)]

    def runner_of(self, test: str) -> str | None:
        cls, _, meth = test.partition("::")
        if meth:
            return self.methods.get(cls, {}).get(meth) or self.classes.get(cls) or self.module_runner
        return self.functions.get(cls) or self.classes.get(cls) or self.module_runner


def _marks(node: ast.expr) -> list[ast.expr]:
    return list(node.elts) if isinstance(node, (ast.List, ast.Tuple)) else [node]


def _mark_name(node: ast.expr) -> str | None:
    """``pytest.mark.gpu`` -> 'gpu'; ``mark.runner("x")`` -> 'runner'."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        base = node.value
        if isinstance(base, ast.Attribute) and base.attr == "mark":
            return node.attr
        if isinstance(base, ast.Name) and base.id == "mark":
            return node.attr
    return None


def _runner_from(marks: list[ast.expr], where: str) -> str | None:
    for mark in marks:
        if _mark_name(mark) != "runner":
            continue
        args = mark.args if isinstance(mark, ast.Call) else []
        if len(args) != 1 or not isinstance(args[0], ast.Constant) or not isinstance(args[0].value, str):
            raise UsageError(f"{show(where, 120)}: pytest.mark.runner takes one string literal label")
        return args[0].value
    return None


def _pytestmark(body: list[ast.stmt]) -> list[ast.expr]:
    for stmt in body:
        if isinstance(stmt, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in stmt.targets
        ):
            return _marks(stmt.value)
    return []


def parse_source(source: str, path: str) -> TestInfo:
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError) as err:  # ValueError: NUL bytes, on some Pythons
        line = getattr(err, "lineno", None)
        raise failure(UsageError, WHAT, path, "not valid Python" + (f" (line {line})" if line else "")) from None
    except (MemoryError, RecursionError):  # the parser's stack, not the machine's memory
        raise failure(UsageError, WHAT, path, "too deeply nested to parse") from None
    module_marks = _pytestmark(tree.body)
    info = TestInfo(path, _runner_from(module_marks, path), any(_mark_name(m) == "gpu" for m in module_marks))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            info.functions[node.name] = _runner_from(node.decorator_list, f"{path}::{node.name}")
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            where = f"{path}::{node.name}"
            info.classes[node.name] = _runner_from(node.decorator_list + _pytestmark(node.body), where)
            info.methods[node.name] = {
                m.name: _runner_from(m.decorator_list, f"{where}::{m.name}")
                for m in node.body
                if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and m.name.startswith("test")
            }
    return info


def _read(path: Path) -> str:
    # Named by its file name, not the checkout's directories: a reply on the pull request shows it.
    return read_document(path, WHAT, UsageError, limit=MAX_FILE_BYTES, shown=path.name)


def scan(path: Path) -> TestInfo:
    try:
        st = path.stat()
    except OSError:
        st = None
    if st is None or st.st_size > MAX_FILE_BYTES:  # read_document says what is wrong, in its one line
        return parse_source(_read(path), path.name)
    # One comment names the same file many times (a spec per test): parse it once.
    return _scan(str(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=256)
def _scan(path: str, mtime_ns: int, size: int) -> TestInfo:
    return parse_source(_read(Path(path)), Path(path).name)
