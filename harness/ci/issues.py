"""A tracking issue per title: opened, updated or reopened, and a note added once; the
pieces both triages (triage.py, reference_triage.py) file with. Standard library and the
GitHub client only, so the ci install (no pydantic, no engine) imports it with its parser."""

from __future__ import annotations

import hashlib

from harness.ci.github_client import Client

MAX_KEY_IN_TITLE = 180


def short_key(key: str, limit: int = MAX_KEY_IN_TITLE) -> str:
    """A config key short enough for a title: GitHub titles stop at 256 characters, and a
    long key keeps a hash of the whole so two keys alike in their first part stay apart."""
    if len(key) > limit:
        key = key[: limit - 10] + "~" + hashlib.sha256(key.encode()).hexdigest()[:8]
    return key


def open_or_update(client: Client, title: str, body: str, label: str) -> str:
    """The one issue of a title and label: opened, or its body replaced (reopened if closed);
    the log line of what was done."""
    found = client.find_issue(title, label)
    if found is None:
        return f"opened #{client.open_issue(title, body, [label])}: {title}"
    reopen = found.get("state") != "open"
    client.update_issue(found["number"], body, reopen=reopen)
    return f"{'reopened' if reopen else 'updated'} #{found['number']}: {title}"


def note_once(client: Client, title: str, label: str, note: str, *, mark: str, tail: int, what: str) -> str | None:
    """Append note to the open issue of a title, unless the last tail characters of its body
    already carry mark (a later run would say it again); the log line ("noted WHAT on #N"),
    or None when there was nothing to note."""
    found = client.find_issue(title, label)
    if found is None or found.get("state") != "open" or mark in found["body"][-tail:]:
        return None
    client.update_issue(found["number"], found["body"] + note)
    return f"noted {what} on #{found['number']}: {title}"
