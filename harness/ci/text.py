"""Untrusted text (pull-request files, artifacts, comments) as it may appear in a reply."""

from __future__ import annotations


def show(text: str, limit: int = 60) -> str:
    """Echo user text back safely: ASCII only, no backticks, no line breaks or control
    characters (a newline would end the code span and start a heading), truncated, in a
    code span, where GitHub renders no markdown and no mention."""
    text = str(text).encode("ascii", "backslashreplace").decode("ascii").replace("`", "'")
    text = "".join(ch if 32 <= ord(ch) < 127 else f"\\x{ord(ch):02x}" for ch in text)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"`{text}`"
