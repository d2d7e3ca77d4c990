"""``kvbench bot``: the pull-request comment bot (handle an event, try a comment, report)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from harness.ci.config_file import read_config
from harness.ci.github_client import GitHubClient
from harness.ci.recording import client_for
from harness.core.errors import HarnessError, UsageError
from harness.store.artifact import ArtifactError, read_rows
from harness.store.links import mlflow_link
from mini_engine.errors import KVBenchError
from mini_engine.files import read_document


def _setup(args: argparse.Namespace):
    from harness.ci.permissions import load_permissions  # pydantic: only this command loads it, not the parser
    from harness.ci.runners import load_registry  # pydantic: only this command loads it, not the parser

    root = Path(args.root)
    registry = load_registry(root / "ci" / "runners.toml")
    perms = load_permissions(root / "ci" / "permissions.json", registry.labels)
    return root, registry, perms


def cmd_handle(args: argparse.Namespace) -> int:
    from harness.ci.handle import EventError, handle_event  # pydantic: only this command loads it, not the parser

    root, registry, perms = _setup(args)
    event = read_config(args.event, "--event", error=EventError)
    if not isinstance(event, dict):
        raise EventError(f"--event {args.event} is not an issue_comment payload")
    client = client_for(args.github)
    out = handle_event(event, client, root, Path(args.tree) if args.tree else root, registry, perms,
                       args.head_sha or None)
    plan = out.plan
    if plan.command is None:
        print("bot: not a command, nothing to do")
        return 0
    state = "refused: " + plan.refusal if plan.refusal else f"{len(plan.groups)} group(s)"
    print(f"bot: /{plan.command} by {plan.user} on #{plan.pr}: {state}")
    if not args.github:
        for call in client.calls:
            print("  would call:", *call)
        if out.reply_id is not None:
            print(client.comments[out.reply_id])
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from harness.ci import reply  # pydantic: only this command loads it, not the parser
    # pydantic: only this command loads it, not the parser
    from harness.ci.bot import Comment, known_suites, plan_comment

    if args.pr < 1:
        raise UsageError(f"--pr must be a pull request number >= 1 (got {args.pr})")
    root, registry, perms = _setup(args)
    comment = Comment(args.comment, args.user, args.association, args.pr, args.author or args.user)
    plan = plan_comment(comment, root, registry, perms, known_suites(root), root)
    if plan.command is None:
        print("not a bot command (a command is a first line starting with '/')")
        return 0
    print(reply.render(plan), end="")
    return 1 if plan.refusal else 0


def _table(args: argparse.Namespace, root: Path) -> tuple[str | None, bool]:
    """(markdown compare table, failed) for a rerun suite's results, if there are any."""
    # lexists: a link or FIFO there is a damaged artifact, which read_rows refuses, not "no results"
    if not args.results or not os.path.lexists(Path(args.results) / "results.jsonl"):
        return None, False
    from harness.ci.runners import load_registry  # pydantic: only this command loads it, not the parser
    from harness.ci.specs import show  # pydantic: only this command loads it, not the parser
    from harness.judge.baseline import load_baseline  # pydantic: only this command loads it, not the parser
    from harness.judge.compare import compare_rows  # pydantic: only this command loads it, not the parser

    path = args.baseline
    if not path and args.baseline_runner:
        profile = load_registry(root / "ci" / "runners.toml").get(args.baseline_runner).profile
        path = root / "results" / "baselines" / f"{profile}.json"
    try:
        # The results come from the pull request's run: damaged ones fail the group, and
        # the status is still set (an exception here would leave it 'running' for good).
        rows = read_rows(Path(args.results))
        if not path or not Path(path).is_file():
            return f"_{len(rows)} configs ran; no baseline at {show(str(path), 120)} to compare with._", False
        report = compare_rows(rows, load_baseline(path))
    except ArtifactError as err:
        return f"_failed: artifact unreadable: {show(str(err), 200)}_", True
    except (HarnessError, KVBenchError) as err:  # the engine's too: the rows are the pull request's
        return f"_the results could not be compared: {show(str(err), 300)}_", True
    except (ArithmeticError, ValueError, TypeError) as err:
        # Figures the checks let through but compare cannot use: the group fails, its status is still set.
        return f"_the results could not be compared: {show(type(err).__name__)}_", True
    return report.table(fmt="markdown"), bool(report.regressed)


def cmd_report(args: argparse.Namespace) -> int:
    from harness.ci import handle, reply  # pydantic: only this command loads it, not the parser

    root = Path(args.root)
    if (args.status is None) == (args.result is None):
        raise UsageError("give exactly one of --status or --result")
    status = args.status or handle.status_of(args.result)
    if status not in reply.STATUSES:
        raise UsageError(f"--result must be success, failure, cancelled or skipped (got {args.result!r})")
    table, failed = _table(args, root)
    if failed and status == "passed":
        status = "failed"
    links = [u for u in args.mlflow_url if u]
    if args.results and links:
        # A bare UI URL becomes the link to the sweep's MLflow run when the run dir knows it.
        run_link = mlflow_link(Path(args.results), links[0])
        links = [run_link] if run_link else links
    if args.github:
        handle.report(GitHubClient(args.github), args.comment_id, args.group, status, args.run_url, links, table,
                      settle_s=handle.SETTLE_S)
        print(f"bot: reply {args.comment_id} group {args.group} -> {status}")
        return 0
    if not args.body_file:
        raise UsageError("--dry-run needs --body-file (a saved reply to update)")
    body = read_document(args.body_file, "--body-file", UsageError)
    print(reply.update(body, args.group, status, args.run_url, links, table), end="")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("bot", help="pull-request comment bot: /rerun-test, /rerun-suite, /tag-and-rerun-ci, /rerun-sglang")
    sub = p.add_subparsers(dest="bot_command", metavar="BOT_COMMAND", parser_class=type(p))
    sub.required = True

    h = sub.add_parser("handle", help="handle an issue_comment event file (what the bot workflow runs)")
    h.add_argument("--event", required=True, metavar="FILE", help="the event payload ($GITHUB_EVENT_PATH)")
    where = h.add_mutually_exclusive_group()
    where.add_argument("--github", metavar="OWNER/REPO", help="act on GitHub (token from GITHUB_TOKEN)")
    where.add_argument("--dry-run", action="store_true", help="print the calls instead (the default)")
    h.add_argument("--tree", metavar="DIR", help="checkout of the pull request whose suites/ is searched")
    h.add_argument("--head-sha", metavar="SHA", help="the commit checked out in --tree; the runs are pinned to it")
    h.add_argument("--root", default=".", help="repository root (ci/runners.toml, ci/permissions.json)")
    h.set_defaults(func=cmd_handle)

    pl = sub.add_parser("plan", help="show the reply to a comment, without GitHub (exit 1 if refused)")
    pl.add_argument("comment", help="the comment text")
    pl.add_argument("--user", default="someone", help="commenter login")
    pl.add_argument("--association", default="MEMBER", help="GitHub author association (MEMBER, CONTRIBUTOR, ...)")
    pl.add_argument("--author", help="pull request author (default: the commenter)")
    pl.add_argument("--pr", type=int, default=1)
    pl.add_argument("--root", default=".", help="repository root")
    pl.set_defaults(func=cmd_plan)

    r = sub.add_parser("report", help="update one group's status in a bot reply (what rerun-test runs)")
    r.add_argument("--comment-id", type=int, required=True, metavar="ID")
    r.add_argument("--group", type=int, required=True, metavar="N", help="group number (1-based)")
    r.add_argument("--status", choices=("queued", "running", "passed", "failed", "cancelled", "error"))
    r.add_argument("--result", metavar="RESULT", help="a GitHub job result: success, failure, cancelled")
    r.add_argument("--run-url", default="", metavar="URL")
    r.add_argument("--mlflow-url", action="append", default=[], metavar="URL",
                   help="MLflow link (repeatable); with --results, the UI base URL")
    r.add_argument("--results", metavar="DIR", help="a rerun sweep's run directory: add its compare table")
    r.add_argument("--baseline", metavar="FILE", help="baseline for the table")
    r.add_argument("--baseline-runner", metavar="LABEL", help="or: the runner whose profile baseline to use")
    where = r.add_mutually_exclusive_group()
    where.add_argument("--github", metavar="OWNER/REPO")
    where.add_argument("--dry-run", action="store_true")
    r.add_argument("--body-file", metavar="FILE", help="with --dry-run: the reply body to update")
    r.add_argument("--root", default=".", help="repository root")
    r.set_defaults(func=cmd_report)
