"""The bot on recorded comments against a hostile pull-request tree.

The bot reads suites/ of a pull request it does not trust: the files it parses may
be symlink loops, too deep to parse, or carry runner marks written to abuse the
reply. Each such comment still gets one reply with a reason, never a crash, and no
text from the pull request reaches the reply outside a short code span.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.ci.handle import handle_event
from harness.ci.recording import RecordingClient
from harness.ci.specs import show

DEEP = "x = " + "-" * 200_000 + "1\n\n\ndef test_a():\n    pass\n"
MARKDOWN = "x` <img src=x> @org/team [click](https://evil.example) `"


@pytest.fixture
def hostile(setup):
    tree, registry, perms = setup
    unit = tree / "suites" / "unit"
    os.symlink("test_loop.py", unit / "test_loop.py")
    (unit / "test_deep.py").write_text(DEEP)
    (unit / "test_mark.py").write_text(f"import pytest\n\n\n@pytest.mark.runner({MARKDOWN!r})\ndef test_a():\n    pass\n")
    (unit / "test_bigmark.py").write_text(
        f"import pytest\n\n\n@pytest.mark.runner({'A' * 100_000!r})\ndef test_b():\n    pass\n")
    return tree, registry, perms


def _reply(name: str, load_event, tree: Path, registry, perms) -> tuple[str, str]:
    client = RecordingClient()
    out = handle_event(load_event(name), client, tree, tree, registry, perms)
    assert client.count("post_comment") == 1 and client.count("dispatch_workflow") == 0
    return out.plan.refusal, client.comments[out.reply_id]


@pytest.mark.parametrize("name, why", [
    ("rerun_test_symlink_loop", "no such test file"),
    ("rerun_test_too_deep", "too deeply nested"),
])
def test_unparseable_files_are_refused(name, why, hostile, load_event):
    refusal, body = _reply(name, load_event, *hostile)
    assert why in refusal and why in body


@pytest.mark.parametrize("name", ["rerun_test_markdown_mark", "rerun_test_huge_mark"])
def test_runner_marks_are_quoted_and_short_in_the_reply(name, hostile, load_event):
    refusal, body = _reply(name, load_event, *hostile)
    assert "is not in ci/runners.toml" in refusal
    assert len(body) < 2000  # a GitHub comment holds 65536 characters: the reply must still post
    # The label shows only inside one code span (where GitHub renders no HTML, link or mention).
    shown = show(MARKDOWN if name == "rerun_test_markdown_mark" else "A" * 100_000)
    assert shown in refusal
    outside = body.replace(shown, "")
    assert not any(bad in outside for bad in ("<img", "@org", "](https://evil", "AAAA"))


def test_suites_symlinked_out_of_the_tree(setup, load_event, tmp_path):
    tree, registry, perms = setup
    outside = tmp_path / "elsewhere"
    (tree / "suites").rename(outside)
    os.symlink(outside, tree / "suites")
    refusal, body = _reply("rerun_test_suites_link", load_event, tree, registry, perms)
    assert "suites/ is a symlink" in refusal


ODD_DIR = "x\n```\n[click](https:evil.example) $(id)"


def test_a_file_found_by_name_in_an_odd_directory_is_not_used(setup, load_event):
    """A bare file name is looked up in the pull request's tree, whose directory names
    are its author's: a path the allow-list would refuse is neither run nor echoed."""
    tree, registry, perms = setup
    odd = tree / "suites" / ODD_DIR
    odd.mkdir()
    (odd / "test_only.py").write_text("def test_a():\n    pass\n")
    (odd / "test_dup.py").write_text("def test_one():\n    pass\n")
    refusal, body = _reply("rerun_test_odd_directory", load_event, tree, registry, perms)
    assert "no test file named `test_only.py`" in refusal
    refusal, body = _reply("rerun_test_ambiguous_odd_directory", load_event, tree, registry, perms)
    assert "is ambiguous: suites/gpu/test_dup.py, suites/unit/test_dup.py;" in refusal
    assert "evil" not in body and "$(id)" not in body
