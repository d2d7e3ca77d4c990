"""Strict allow-lists for everything a comment may put on a command line.

Comment text is hostile until proven otherwise. Nothing from it reaches argv unless it
matched one of the patterns here *and* names something that exists (a test file under
suites/, a test in it found statically, a suite, a runner label). Every rejection is a
``Refusal`` whose message is the reply the commenter sees.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from harness.ci.testfiles import scan
from harness.ci.text import show  # noqa: F401  (re-exported: callers import it from here)
from harness.core.errors import HarnessError
from harness.schemas.ci import SUITE_RE  # one spelling of a suite name, the runner registry's too

MAX_LINE = 1000  # characters of the first comment line
MAX_TOKEN = 200  # characters of one spec
MAX_FILTER = 200
NAME = r"[A-Za-z_][A-Za-z0-9_]{0,99}"
PATH_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./-]*\.py\Z", re.ASCII)
TEST_RE = re.compile(rf"{NAME}((::|\.){NAME})?\Z", re.ASCII)
FILE_NAME_RE = re.compile(r"(test_[A-Za-z0-9_]*|[A-Za-z0-9_]*_test)\.py\Z", re.ASCII)
SPEC_CHARS = "letters, digits and _ . / : -"
# A filter is a pytest -k expression over the grid's test ids (`spec:dflash and ps:16`),
# restricted to words of FILTER_WORD_RE joined by and/or/not: no quotes, brackets or
# other shell metacharacters, so it is harmless even as one argv entry.
FILTER_WORD_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_:.+-]{0,63}\Z", re.ASCII)
FILTER_KEYWORDS = ("and", "or", "not")


class Refusal(HarnessError):
    """A comment the bot will not act on; the message is the reason shown in the reply."""


def check_line(line: str) -> None:
    """The first comment line: bounded, printable ASCII (no look-alike letters or slashes)."""
    if len(line) > MAX_LINE:
        raise Refusal(f"the command line is {len(line)} characters; at most {MAX_LINE} are read")
    for col, ch in enumerate(line, 1):
        if ord(ch) > 127:
            name = unicodedata.name(ch, "unnamed character")
            raise Refusal(
                f"non-ASCII character U+{ord(ch):04X} {name} at column {col}; "
                "commands, paths and test names are plain ASCII"
            )
        if ch != "\t" and not ch.isprintable():
            raise Refusal(f"control character 0x{ord(ch):02x} at column {col}")


def first_line(body: str) -> str:
    """Only the first line of a comment is a command; the rest is conversation."""
    return body.replace("\r\n", "\n").replace("\r", "\n").split("\n", 1)[0].strip(" \t")


def _bad_char(token: str, allowed: str) -> str | None:
    for ch in token:
        if not (ch.isascii() and (ch.isalnum() or ch in allowed)):
            return ch
    return None


@dataclass(frozen=True)
class TestSpec:
    file: str  # repository-relative path under suites/
    test: str | None  # "func", "Class" or "Class::method"

    @property
    def node_id(self) -> str:
        return f"{self.file}::{self.test}" if self.test else self.file


def _find_by_name(suites: Path, name: str) -> list[str]:
    # The directories are the pull request's: a path the allow-list refuses is not a match.
    root = suites.parent
    found = (p.relative_to(root).as_posix() for p in suites.rglob(name) if p.is_file())
    return sorted(path for path in found if PATH_RE.match(path))


def parse_test_spec(token: str, root: Path) -> TestSpec:
    """``suites/x/test_y.py``, ``test_y.py`` (unique under suites/), with ``::Class.method``."""
    if len(token) > MAX_TOKEN:
        raise Refusal(f"spec {show(token)} is longer than {MAX_TOKEN} characters")
    bad = _bad_char(token, "_./:-")
    if bad is not None:
        name = unicodedata.name(bad, f"U+{ord(bad):04X}")
        raise Refusal(f"spec {show(token)} contains {name} ({show(bad)}); a spec is {SPEC_CHARS}")
    path, sep, test = token.partition("::")
    if sep and not TEST_RE.match(test):
        raise Refusal(f"spec {show(token)}: a test is func, Class, Class.method or Class::method")
    if path.startswith("/") or "\\" in path:
        raise Refusal(f"spec {show(token)}: paths are relative to the repository root")
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise Refusal(f"spec {show(token)}: path components '..', '.' and empty ones are not allowed")
    if not PATH_RE.match(path) or not FILE_NAME_RE.match(parts[-1]):
        raise Refusal(f"spec {show(token)}: a test file is suites/.../test_*.py or *_test.py")

    suites = root / "suites"
    # A pull request may make suites/ itself a link (to `/`, say): every lookup would leave the tree.
    if suites.is_symlink() or not suites.is_dir():
        raise Refusal("the tree's suites/ is a symlink or not a directory; test files are not looked up there")
    if len(parts) == 1:
        found = _find_by_name(suites, path)
        if not found:
            raise Refusal(f"no test file named {show(path)} under suites/")
        if len(found) > 1:
            raise Refusal(f"{show(path)} is ambiguous: {', '.join(found[:5])}; give the path")
        path = found[0]
    elif parts[0] != "suites":
        raise Refusal(f"spec {show(token)}: test files live under suites/")
    full = root / path
    # A symlink could point out of the tree; the resolved file must stay under suites/.
    try:
        inside = full.resolve().is_relative_to(suites.resolve())
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop (Python < 3.13)
        inside = False
    if not inside or not full.is_file():
        raise Refusal(f"no such test file: {show(path)}")
    if not test:
        return TestSpec(path, None)
    test = test.replace(".", "::")
    try:
        info = scan(full)
    except HarnessError as err:
        raise Refusal(str(err)) from None
    if not info.has(test):
        raise Refusal(f"no test {show(test)} in {path}")
    return TestSpec(path, test)


def check_filter(expr: str) -> str:
    """``WORD``, ``not WORD``, joined by ``and`` / ``or``; pytest's own -k parser must agree."""
    if len(expr) > MAX_FILTER:
        raise Refusal(f"--filter is longer than {MAX_FILTER} characters")
    words = expr.split()
    if not words:
        raise Refusal("--filter needs an expression, e.g. `spec:dflash and ps:16`")
    want_term = True
    for word in words:
        if want_term and word == "not":
            continue
        if want_term:
            if word in FILTER_KEYWORDS or not FILTER_WORD_RE.match(word):
                raise Refusal(
                    f"--filter word {show(word)} is not allowed: words are letters, digits and _ : . + - "
                    "joined by and, or, not (a pytest -k expression over test ids)"
                )
        elif word not in ("and", "or"):
            raise Refusal(f"--filter: expected `and` or `or` before {show(word)}")
        want_term = not want_term
    if want_term:
        raise Refusal("--filter ends with an operator")
    from _pytest.mark.expression import Expression  # what `pytest -k` (and so the sweep) parses with

    try:
        Expression.compile(" ".join(words))
    except Exception as err:  # ParseError in older pytest, SyntaxError in newer
        raise Refusal(f"--filter is not a pytest -k expression: {str(err).splitlines()[0]}") from None
    return " ".join(words)


def check_suite(name: str, known: list[str]) -> str:
    if not SUITE_RE.match(name):
        raise Refusal(f"suite {show(name)}: a suite name is lowercase letters, digits, _ and -")
    if name not in known:
        raise Refusal(f"no suite {show(name)}; known suites: {', '.join(known) or 'none'}")
    return name
