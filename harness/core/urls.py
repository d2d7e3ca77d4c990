"""Web addresses kvbench puts in links (MLflow UI, workflow runs): http(s) only.

A link's target is written into Markdown (`[run](URL)`) and HTML (`href`): a
`javascript:` address, or one with brackets or spaces, would run script or end the
link early and start one of someone else's. The same rule serves every option and
variable that names such an address."""

from __future__ import annotations

import re

from harness.core.errors import UsageError

URL_RE = re.compile(r"https?://[A-Za-z0-9._~:/?#@!$&'*+,;=%-]{1,500}\Z", re.ASCII)
ALLOWED = "an http(s) URL without spaces, quotes or brackets"


def is_web_url(url: str) -> bool:
    return isinstance(url, str) and bool(URL_RE.match(url)) and not any(c in url for c in "()'")


def check_web_url(url: str, option: str) -> str:
    """``url`` if it may be a link target, else one line naming ``option``; '' passes (no link)."""
    if url and not is_web_url(url):
        raise UsageError(f"{option} must be {ALLOWED} (got {str(url)[:80]!r})")
    return url
