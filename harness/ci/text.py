"""Untrusted text (pull-request files, artifacts, comments) as it may appear in a reply.

The escaping itself is harness.core.markdown's (one rule for every Markdown kvbench writes);
this module adds the bot's ASCII-only echo and the one-line issue title."""

from __future__ import annotations

from harness.core.markdown import code, one_line  # noqa: F401  (code re-exported: triage, bisect import it here)


def show(text: str, limit: int = 60) -> str:
    """Echo user text back safely: ASCII only (a look-alike letter shows as its escape),
    on one line, cut short, in a code span (harness.core.markdown.code)."""
    text = str(text).encode("ascii", "backslashreplace").decode("ascii")
    text = "".join(ch if 32 <= ord(ch) < 127 else f"\\x{ord(ch):02x}" for ch in text)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return code(text, limit + 1)


def plain(text: object, limit: int = 200) -> str:
    """Text for an issue title (not Markdown): one line, no control characters."""
    return one_line(text, limit)
