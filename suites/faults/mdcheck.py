"""What GitHub would render live in a Markdown text, found by parsing it.

markdown-it (installed with rich) parses CommonMark plus GFM tables, as GitHub does.
It does not run GitHub's extensions that act on plain text after parsing (autolinks of
``https://``, ``www.`` and e-mail addresses, @mentions), so those are looked for in the
text nodes it leaves: text inside code spans and fences is no text node and is inert.
A module, not the conftest: test modules import it by name."""

from __future__ import annotations

import re

from markdown_it import MarkdownIt

MD = MarkdownIt("commonmark").enable("table").enable("strikethrough")
# GitHub's post-parse extensions over plain text: autolinks and mentions.
TEXT_LIVE = re.compile(r"(?i)[a-z][a-z0-9+.-]*://|www\.|@[a-z0-9]")


def live(text: str, *, links: tuple[str, ...] = (), headings: tuple[str, ...] = (), mention: str = "",
         html: tuple[str, ...] = ()) -> list[str]:
    """Everything in ``text`` that renders as a link, image, heading, quote, HTML, autolink or
    mention, but the links to ``links``, headings starting with one of ``headings``, HTML
    starting with one of ``html`` and ``@mention``."""
    found = []
    tokens = MD.parse(text)
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open":
            title = tokens[i + 1].content
            if not title.startswith(headings) or not headings:
                found.append(f"heading {title!r}")
        elif tok.type in ("html_block", "blockquote_open", "hr"):
            if tok.type != "html_block" or not (html and tok.content.startswith(html)):
                found.append(f"{tok.type} {tok.content[:80]!r}")
        for child in tok.children or []:
            if child.type == "link_open" and child.attrGet("href") not in links:
                found.append(f"link to {child.attrGet('href')!r}")
            elif child.type == "image":
                found.append(f"image {child.attrGet('src')!r}")
            elif child.type == "html_inline":
                found.append(f"html {child.content!r}")
            elif child.type == "text":
                body = child.content.replace(f"@{mention}", "") if mention else child.content
                # '@me' kept, but not '@me-too' or '@me/team': someone else.
                if mention and re.search(rf"@{re.escape(mention)}[A-Za-z0-9_/-]", child.content):
                    found.append(f"mention in {child.content[:80]!r}")
                found += [f"{m.group(0)!r} in {child.content[:80]!r}" for m in TEXT_LIVE.finditer(body)]
    return found


def cells_per_row(text: str) -> list[int]:
    """The cells of each table line, counted as GitHub splits a row: at every '|' that is
    not the second character of a backslash pair, code spans or not (its table scanner
    runs before inline parsing, so a '|' that got out of its escape adds a cell)."""
    counts = []
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        n, i = 0, 0
        while i < len(line):
            if line[i] == "\\":
                i += 2
                continue
            n += line[i] == "|"
            i += 1
        counts.append(n)
    return counts
