"""Untrusted text (pull-request files, artifacts, comments) as it may appear in a reply."""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def show(text: str, limit: int = 60) -> str:
    """Echo user text back safely: ASCII only, no backticks, no line breaks or control
    characters (a newline would end the code span and start a heading), truncated, in a
    code span, where GitHub renders no markdown and no mention."""
    text = str(text).encode("ascii", "backslashreplace").decode("ascii").replace("`", "'")
    text = "".join(ch if 32 <= ord(ch) < 127 else f"\\x{ord(ch):02x}" for ch in text)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"`{text}`"


def code(text: object, limit: int = 200) -> str:
    """``text`` as one inline code span that no content can break out of: control and
    direction characters dropped, a fence longer than any backtick run inside, and
    ``|`` escaped (GitHub splits table cells before it reads code spans)."""
    s = " ".join(_CONTROL.sub(" ", str(text)).split())
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    s = s.replace("|", "\\|")
    fence = "`" * (max((len(m) for m in re.findall(r"`+", s)), default=0) + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or not s else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def plain(text: object, limit: int = 200) -> str:
    """Text for an issue title (not Markdown): one line, no control characters."""
    s = " ".join(_CONTROL.sub(" ", str(text)).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"
