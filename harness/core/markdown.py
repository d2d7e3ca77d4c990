"""Text we did not write, as it may appear in GitHub Markdown: the one escaper.

Test ids, config keys, statuses, commits, runner marks and error messages come from
result files, pull requests and comments. Wherever they reach Markdown that GitHub
renders (the bot's replies, triage issues, `$GITHUB_STEP_SUMMARY`, `--format markdown`)
they go through ``code``: one inline code span that no content can break out of. Inside
a code span GitHub renders no emphasis, link, autolink (``https://``, ``www.``, e-mail),
mention, heading or HTML. Our own sentences that carry such text go through ``prose``,
which keeps the code spans ``code`` made and makes everything around them inert.
"""

from __future__ import annotations

import re

# Control characters end lines (a newline would end the span and start a heading);
# direction overrides and zero-width characters make text read differently than it is.
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")
ELLIPSIS = "\u2026"
ZWSP = "\u200b"  # breaks a mention or an autolink without changing what a reader sees
# Outside code spans these start links, images, emphasis, HTML, entities, tables or spans.
PUNCT = re.compile(r"([\\`*_\[\]!<>|~&])")
LINE_START = re.compile(r"\A(\s*)([#>+=-]|\d+[.)])")  # a heading, quote, list or setext line
AUTOLINK = re.compile(r"(?i)(?<=[a-z])(:)(?=//)|(?<=www)(\.)")
SPAN = re.compile(r"(?<!`)(`+)(?!`).*?(?<!`)\1(?!`)", re.S)


def one_line(text: object, limit: int) -> str:
    """``text`` on one line (every run of whitespace or control characters one space), cut to ``limit``."""
    s = " ".join(CONTROL.sub(" ", str(text)).split())
    return s if len(s) <= limit else s[: max(limit - 1, 0)] + ELLIPSIS


def code(text: object, limit: int = 200) -> str:
    """``text`` as one inline code span: on one line, cut short, its fence one backtick
    longer than any run inside, and ``|`` escaped (GitHub splits a table row at every
    unescaped ``|`` before it reads code spans; outside a table the backslash shows)."""
    # A backslash before a '|' would pair with our escape's backslash and free the '|':
    # a zero-width space keeps them apart.
    s = re.sub(r"\\(?=\|)", "\\" + ZWSP, one_line(text, limit)).replace("|", "\\|")
    fence = "`" * (max((len(m) for m in re.findall(r"`+", s)), default=0) + 1)
    # A span whose text starts or ends with a backtick needs a space inside the fence;
    # an empty span would be two backticks, which is no span at all.
    pad = " " if not s or s[0] == "`" or s[-1] == "`" else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def _inert(part: str, keep_mention: str) -> str:
    part = PUNCT.sub(r"\\\1", part)
    part = AUTOLINK.sub(lambda m: (m.group(1) or m.group(2)) + ZWSP, part)
    # Every '@' is broken but the one of the login we mean to notify, and only where the
    # login ends there ('@me-too' and '@me/team' are someone else).
    keep = rf"(?!{re.escape(keep_mention)}(?![A-Za-z0-9_/-]))" if keep_mention else ""
    return re.sub("@" + keep, "@" + ZWSP, part)


def prose(text: object, limit: int = 600, keep_mention: str = "") -> str:
    """A sentence of ours as inert Markdown: one line, cut short; the code spans in it
    (made by ``code``) kept, everything else escaped: no emphasis, link, image, HTML,
    entity, table cell, autolink or mention (but ``@keep_mention``), and no heading,
    quote or list when it starts a line."""
    s = one_line(text, limit)
    out, at = [], 0
    for m in SPAN.finditer(s):
        out += [_inert(s[at:m.start()], keep_mention), m.group(0)]
        at = m.end()
    out.append(_inert(s[at:], keep_mention))
    joined = "".join(out)
    # '1.' is a list item, '1\.' is not: the backslash goes before the punctuation.
    return LINE_START.sub(lambda m: m.group(1) + m.group(2)[:-1] + "\\" + m.group(2)[-1], joined)

