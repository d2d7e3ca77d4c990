"""The bot's reply comment: rendered from a plan, carrying that plan as hidden state.

Each rerun workflow updates its own group's status marker. The reply embeds the plan as
JSON in an HTML comment, so an update re-reads the state and re-renders the whole body,
rather than patching markdown text.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict

from harness.ci.bot import Group, Plan, USAGE
from harness.core.errors import HarnessError
from harness.core.markdown import code, prose
from harness.core.urls import is_web_url

STATE_RE = re.compile(r"<!-- kvbench-bot (\{.*?\}) -->", re.S)
STATUSES = ("queued", "dispatched", "running", "passed", "failed", "cancelled", "error")
MARKERS = {
    "queued": "\u23f3 queued",
    "dispatched": "\U0001f4e4 dispatched",
    "running": "\U0001f504 running",
    "passed": "\u2705 passed",
    "failed": "\u274c failed",
    "cancelled": "\u26aa cancelled",
    "error": "\u26a0\ufe0f error",
}
MAX_TEXT = 600  # characters of one sentence of ours (a refusal, a note) in a reply


class ReplyError(HarnessError):
    """The comment to update is not a kvbench bot reply, or names no such group."""


def check_url(url: str) -> str:
    if not is_web_url(url):
        raise ReplyError(f"a link must be an http(s) URL without spaces or brackets (got {url[:80]!r})")
    return url


def plain(text: str, keep_mention: str = "", limit: int = MAX_TEXT) -> str:
    """A sentence of the bot's as inert text (harness.core.markdown.prose): the code spans that
    show() made of untrusted text kept, the rest escaped, no mention but @keep_mention."""
    return prose(text, limit, keep_mention)


def safe_table(table: str) -> str:
    """A compare table as markdown, with nothing in it that renders as HTML, an image or
    a mention (its names were checked as plain tokens when the artifact was read)."""
    return table.replace("<", "&lt;").replace("![", "!\\[").replace("@", "@\u200b")


def _links(group: Group) -> str:
    links = [f"[workflow run]({group.run_url})"] if group.run_url else []
    links += [f"[MLflow run {i}]({u})" if len(group.mlflow) > 1 else f"[MLflow]({u})"
              for i, u in enumerate(group.mlflow, 1)]
    return " \u00b7 ".join(links)


def render(plan: Plan) -> str:
    state = {"v": 1, "command": plan.command, "user": plan.user, "pr": plan.pr,
             "groups": [asdict(g) for g in plan.groups], "notes": plan.notes, "head": plan.head}
    raw = json.dumps(state, ensure_ascii=True, separators=(",", ":"))
    # Escaped so that nothing in the state (a compare table, say) can close the HTML comment.
    raw = raw.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    lines = [f"<!-- kvbench-bot {raw} -->"]
    who = f"@{plan.user}" if plan.user else "a commenter"
    if plan.refusal:
        what = f"`/{plan.command}`" if plan.command in USAGE else "this comment"
        lines.append(f"**kvbench bot** cannot run {what} for {who}: {plain(plan.refusal, plan.user)}")
        lines.append("")
        lines.append("Commands: " + ", ".join(f"`{u}`" for u in USAGE.values()))
    elif plan.command == "tag-and-rerun-ci":
        lines.append(f"**kvbench bot** `/tag-and-rerun-ci` for {who}")
    else:
        n = len(plan.groups)
        at = f" on {code(plan.head[:12])}" if plan.head else ""
        lines.append(f"**kvbench bot** `/{plan.command}` for {who}: {n} run{'s' if n != 1 else ''}{at}")
    for i, group in enumerate(plan.groups, 1):
        lines += ["", f"**{i}. runner {code(group.runner, 60)}** \u2014 {MARKERS[group.status]}"]
        if group.note:
            lines.append(plain(group.note))
        lines += ["```", group.command(), "```"]
        links = _links(group)
        if links:
            lines.append(links)
        if group.table:
            lines += ["", safe_table(group.table)]
    for note in plan.notes:
        lines += ["", f"_{plain(note)}_"]
    return "\n".join(lines) + "\n"


def parse(body: str) -> Plan:
    match = STATE_RE.search(body or "")
    if not match:
        raise ReplyError("the comment is not a kvbench bot reply (no state marker)")
    try:
        state = json.loads(match.group(1))
        groups = [Group(**g) for g in state["groups"]]
        for g in groups:
            # A status this version does not know (an edited or newer reply) must not stop the
            # update of another group: it shows as an error, and the others still move on.
            if not isinstance(g.status, str) or g.status not in STATUSES:
                g.status, g.note = "error", "the saved status of this group was not one the bot knows"
            if not isinstance(g.runner, str):
                raise TypeError("runner")
        notes = [str(n) for n in state.get("notes", [])]
        return Plan(state["command"], user=state["user"], pr=int(state["pr"]), groups=groups, notes=notes,
                    head=str(state.get("head", "")))
    except (ValueError, KeyError, TypeError) as err:
        raise ReplyError(f"the kvbench bot state in the comment is damaged ({type(err).__name__})") from None


def update(body: str, group: int, status: str, run_url: str = "", mlflow: list[str] | None = None,
           table: str | None = None, note: str | None = None) -> str:
    """Body with group ``group`` (1-based) set to ``status``; other groups untouched."""
    if status not in STATUSES:
        raise ReplyError(f"status must be one of {', '.join(STATUSES)} (got {status!r})")
    plan = parse(body)
    if not 1 <= group <= len(plan.groups):
        raise ReplyError(f"group must be in 1..{len(plan.groups)} (got {group})")
    g = plan.groups[group - 1]
    g.status = status
    if run_url:
        g.run_url = check_url(run_url)
    for url in mlflow or []:
        if check_url(url) not in g.mlflow:
            g.mlflow.append(url)
    if table is not None:
        g.table = table
    if note is not None:
        g.note = note
    return render(plan)
