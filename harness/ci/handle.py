"""Carry out a plan through the GitHub client: reply, dispatch, label, rerun, report.

``handle_event`` is what the comment workflow runs; ``report`` is what each rerun
workflow calls as its status changes. Both talk to GitHub only through ``client``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from harness.ci import reply
from harness.ci.bot import SGLANG_WORKFLOW, Comment, Group, Plan, known_suites, plan_comment
from harness.ci.github_client import Client, GitHubError
from harness.ci.permissions import Permissions
from harness.ci.rerun import check_sha
from harness.ci.runners import Registry
from harness.ci.specs import show
from harness.core.errors import HarnessError

WORKFLOW = "rerun-test.yml"
MAX_TABLE = 20000  # characters of a compare table in a reply (a comment holds 65536)
UPDATE_TRIES = 3
SETTLE_S = 3.0  # long enough for a concurrent reporter's write to land before we read back


class EventError(HarnessError):
    """The event file is not an issue_comment payload."""


def _field(obj: object, key: str, kind: type, where: str):
    value = obj.get(key) if isinstance(obj, dict) else None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise EventError(f"the event file is not an issue_comment payload ({where}.{key} is missing or malformed)")
    return value


def comment_from_event(event: dict) -> tuple[Comment, str]:
    """The comment and the repository's default branch from an issue_comment payload."""
    issue = _field(event, "issue", dict, "event")
    comment = _field(event, "comment", dict, "event")
    number = _field(issue, "number", int, "issue")
    if number < 1:
        raise EventError(f"the event file is not an issue_comment payload (issue.number is {number})")
    body = comment.get("body") or ""
    if not isinstance(body, str):
        raise EventError("the event file is not an issue_comment payload (comment.body is not text)")
    parsed = Comment(
        body=body,
        user=_field(_field(comment, "user", dict, "comment"), "login", str, "comment.user"),
        association=str(comment.get("author_association") or "NONE"),
        pr=number,
        pr_author=_field(_field(issue, "user", dict, "issue"), "login", str, "issue.user"),
        is_pull=bool(issue.get("pull_request")),
    )
    repo = event.get("repository") or {}
    if not isinstance(repo, dict):
        raise EventError("the event file is not an issue_comment payload (event.repository is malformed)")
    branch = repo.get("default_branch")
    return parsed, branch if isinstance(branch, str) and branch else "main"


@dataclass
class Outcome:
    plan: Plan
    reply_id: int | None = None


def handle_event(event: dict, client: Client, root: Path, tree: Path, registry: Registry,
                 perms: Permissions, head_sha: str | None = None) -> Outcome:
    """Plan the comment, reply, then dispatch; a refusal is a reply, never an exception.

    ``head_sha`` is the commit checked out in ``tree``: the runs are pinned to it, so a
    push after the comment is not what runs. Without it, the pull request's head now."""
    if head_sha is not None:
        check_sha(head_sha, "--head-sha")
    if event.get("action", "created") != "created":
        return Outcome(Plan(None))  # edits and deletions are not new commands
    comment, branch = comment_from_event(event)
    plan = plan_comment(comment, tree, registry, perms, known_suites(root), root)
    if plan.command is None:
        return Outcome(plan)
    if plan.groups and plan.command != "rerun-sglang":  # the nightly runs the default branch, not the head
        try:
            plan.head = check_sha(head_sha or client.pull_head_sha(plan.pr), "the pull request's head")
        except HarnessError as err:
            plan.refusal, plan.groups = f"cannot tell which commit to run: {err}", []
    if plan.refusal or plan.command != "tag-and-rerun-ci":
        reply_id = client.post_comment(plan.pr, reply.render(plan))
        if not plan.refusal:
            _dispatch(plan, client, branch, reply_id)
        return Outcome(plan, reply_id)
    return Outcome(plan, _tag_and_rerun(plan, client, perms))


def _dispatch(plan: Plan, client: Client, branch: str, reply_id: int) -> None:
    changed = False
    for i, group in enumerate(plan.groups, 1):
        workflow, inputs = _dispatch_inputs(plan, group, i, reply_id)
        try:
            client.dispatch_workflow(workflow, branch, inputs)
        except GitHubError as err:
            group.status, group.note, changed = "error", f"dispatch failed: {show(str(err), 200)}", True
            continue
        if group.sglang is not None:  # nothing reports back to this reply: say it went
            group.status, changed = "dispatched", True
    if changed:
        client.update_comment(reply_id, reply.render(plan))


def _dispatch_inputs(plan: Plan, group: Group, i: int, reply_id: int) -> tuple[str, dict[str, str]]:
    if group.sglang is not None:
        return SGLANG_WORKFLOW, {"sglang": group.sglang}
    return WORKFLOW, {
        "runner": group.runner,
        "tests": json.dumps(group.tests),
        "suite": group.suite or "",
        "filter": group.filter or "",
        "pr": str(plan.pr),
        "reply_comment": str(reply_id),
        "group": str(i),
        "sha": plan.head,
    }


def _tag_and_rerun(plan: Plan, client: Client, perms: Permissions) -> int:
    lines = []
    try:
        client.add_labels(plan.pr, [perms.ci_label])
        lines.append(f"- labelled {show(perms.ci_label)}")
        runs = client.failed_runs(client.pull_head_sha(plan.pr))
        for run in runs:
            client.rerun_failed_jobs(run["id"])
            # A run's name comes from the workflow file, which a pull request can edit.
            name = show(str(run.get("name") or run.get("id")), 80)
            url = str(run.get("url") or "")
            link = f" ([run]({reply.check_url(url)}))" if _is_url(url) else ""  # a link, never a bare autolink
            lines.append(f"- rerunning failed jobs of {name}{link}")
        if not runs:
            lines.append("- no failed workflow runs on the head commit")
    except GitHubError as err:
        lines.append(f"- \u26a0\ufe0f stopped: {show(str(err), 200)}")
    return client.post_comment(plan.pr, reply.render(plan) + "\n" + "\n".join(lines) + "\n")


def report(client: Client, comment_id: int, group: int, status: str, run_url: str = "",
           mlflow: list[str] | None = None, table: str | None = None, settle_s: float = 0.0) -> str:
    """Set one group's status in the reply. GitHub has no compare-and-swap on comments:
    two groups finishing at once both read-modify-write the reply, and the later write
    can undo the earlier. So the writer waits ``settle_s``, reads back, and re-applies
    its change if it was lost."""
    if table is not None and len(table) > MAX_TABLE:
        table = table[:MAX_TABLE].rsplit("\n", 1)[0] + "\n\n_(table truncated; see the run's artifact)_"
    for _ in range(UPDATE_TRIES):
        body = reply.update(client.get_comment(comment_id), group, status, run_url, mlflow, table)
        client.update_comment(comment_id, body)
        if settle_s:
            time.sleep(settle_s)
        now = reply.parse(client.get_comment(comment_id)).groups[group - 1]
        if now.status == status:
            return body
    raise GitHubError(f"comment {comment_id}: group {group} status did not stick after {UPDATE_TRIES} tries")


def _is_url(url: str) -> bool:
    try:
        reply.check_url(url)
    except reply.ReplyError:
        return False
    return True


def status_of(result: str) -> str:
    """A GitHub job result (success, failure, cancelled, skipped) as a reply status."""
    return {"success": "passed", "failure": "failed", "cancelled": "cancelled", "skipped": "cancelled"}.get(result, result)
