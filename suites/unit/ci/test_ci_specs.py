"""The allow-lists: hand-picked hostile specs, then fuzzing of the whole comment parser."""

from __future__ import annotations

import re
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.ci import specs
from harness.ci.bot import Comment, plan_comment
from harness.ci.specs import Refusal

ARGV_SAFE = re.compile(r"[A-Za-z0-9_./: +-]*\Z", re.ASCII)


@pytest.mark.parametrize("token, why", [
    ("suites/unit/../unit/test_alloc.py", "'..'"),
    ("suites//unit/test_alloc.py", "empty"),
    ("./suites/unit/test_alloc.py", "'.'"),
    ("/suites/unit/test_alloc.py", "relative"),
    ("suites/unit/test_alloc.py;id", "SEMICOLON"),
    ("suites/unit/test_alloc.py|id", "VERTICAL LINE"),
    ("suites/unit/test_alloc.py&&id", "AMPERSAND"),
    ("suites/unit/test_alloc.py>x", "GREATER-THAN SIGN"),
    ("suites/unit/test_*.py", "ASTERISK"),
    ("suites/unit/test_alloc.py::test[1]", "LEFT SQUARE BRACKET"),
    ("suites\\unit\\test_alloc.py", "REVERSE SOLIDUS"),
    ("suites/unit/test_alloc.py\x00", "U+0000"),
    ("suites/unit/conftest.py", "test_*.py"),
    ("suites/unit/test_alloc.pyc", "test_*.py"),
    ("ci/test_x.py", "live under suites/"),
    ("suites/unit/test_alloc.py::", "a test is"),
    ("suites/unit/test_alloc.py::A.b.c", "a test is"),
    ("suites/unit/test_alloc.py::1bad", "a test is"),
    ("s" * 300 + "/test_x.py", "longer than 200"),
])
def test_hostile_specs_are_refused(token, why, tree):
    with pytest.raises(Refusal, match=re.escape(why)):
        specs.parse_test_spec(token, tree)


@pytest.mark.parametrize("token, node", [
    ("suites/unit/test_alloc.py", "suites/unit/test_alloc.py"),
    ("test_alloc.py", "suites/unit/test_alloc.py"),
    ("suites/unit/test_alloc.py::test_extend", "suites/unit/test_alloc.py::test_extend"),
    ("suites/unit/test_alloc.py::TestPages", "suites/unit/test_alloc.py::TestPages"),
    ("suites/unit/test_alloc.py::TestPages.test_free", "suites/unit/test_alloc.py::TestPages::test_free"),
    ("suites/unit/test_alloc.py::TestPages::test_alloc", "suites/unit/test_alloc.py::TestPages::test_alloc"),
])
def test_valid_specs(token, node, tree):
    assert specs.parse_test_spec(token, tree).node_id == node


def test_line_checks():
    specs.check_line("/rerun-test suites/unit/test_alloc.py\t x")
    with pytest.raises(Refusal, match=re.escape("U+0430 CYRILLIC SMALL LETTER A")):
        specs.check_line("/rerun-test suites/unit/test_\u0430lloc.py")
    with pytest.raises(Refusal, match=re.escape("U+00A0 NO-BREAK SPACE")):
        specs.check_line("/rerun-test\u00a0x")
    with pytest.raises(Refusal, match="control character 0x07"):
        specs.check_line("/rerun-test \x07")
    with pytest.raises(Refusal, match="1001 characters"):
        specs.check_line("/" + "a" * 1000)
    assert specs.first_line("/a b\r\n/c d") == "/a b"
    assert specs.first_line("  /a b  \n") == "/a b"


@pytest.mark.parametrize("expr, ok", [
    ("spec:dflash", True),
    ("spec:dflash and ps:16", True),
    ("not policy:unaligned or free:host_pages", True),
    ("spec:dflash and", False),
    ("and spec:dflash", False),
    ("spec:dflash ps:16", False),
    ("(spec:dflash)", False),
    ("spec:dflash;reboot", False),
    ("spec:dflash and $HOME", False),
    ("'spec'", False),
    ("x" * 201, False),
])
def test_filter_grammar(expr, ok):
    if ok:
        assert specs.check_filter(expr) == expr
    else:
        with pytest.raises(Refusal):
            specs.check_filter(expr)


def test_show_is_safe():
    shown = specs.show("a`b\u0430" + "x" * 100)
    # ASCII only, cut to 60 characters, fenced past the backtick it holds (harness.core.markdown.code)
    assert shown == "``a`b\\u0430" + "x" * 48 + "...``"


HOSTILE = st.sampled_from(list(";|&$`<>()[]{}*?!~'\"\\\n\r\t /.:_-") + ["..", "::", "\uff0f", "\u0435", "\u2010",
                                                                       "suites/", "unit/", "test_alloc.py"])
WORDS = st.sampled_from(["/rerun-test", "/rerun-suite", "/tag-and-rerun-ci", "/rerun-sglang", "--runner", "--filter", "smoke",
                         "1-gpu-h100", "cpu", "spec:dflash", "and", "not", "suites/unit/test_alloc.py",
                         "test_alloc.py::TestPages.test_free", "suites/gpu/multi/test_tp8.py", "0.5.23", "3f2a9c1"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.one_of(
    st.text(max_size=300),
    st.lists(st.one_of(WORDS, HOSTILE, st.text(alphabet=string.printable, max_size=12)), max_size=25)
      .map(lambda parts: " ".join(parts)),
    st.lists(st.one_of(WORDS, HOSTILE), min_size=1, max_size=25).map(lambda parts: "".join(parts)),
))
def test_any_comment_is_a_plan_and_only_safe_text_gets_through(body, setup):
    tree, registry, perms = setup
    plan = plan_comment(Comment(body, "core-dev", "MEMBER", 42, "pr-opener"), tree, registry, perms, ["smoke"])
    if plan.command is None or plan.refusal:
        assert not plan.groups
        return
    for group in plan.groups:
        assert group.runner in registry.runners
        for arg in group.argv("r1"):
            assert ARGV_SAFE.match(arg), arg
        for test in group.tests:
            assert (tree / test.split("::")[0]).resolve().is_relative_to((tree / "suites").resolve())
