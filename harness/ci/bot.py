"""Parse one pull-request comment into a plan: what to run, where, or why not.

Pure: no GitHub, no subprocess. The first comment line is the command; everything in
it is checked against allow-lists (harness.ci.specs) and against the repository tree
before it can become a test id, a suite name, a filter or a runner label.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from harness.ci import specs
from harness.ci.permissions import COMMANDS, Permissions
from harness.ci.runners import Registry
from harness.ci.sglang_ref import RELEASE
from harness.ci.specs import Refusal, show
from harness.ci.suite_filter import check_selects
from harness.core.errors import HarnessError

SLASHES = "/\uff0f\u2215\u2044\u29f8\u2571"  # '/' and the look-alikes someone may paste
LOGIN_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})\Z", re.ASCII)
PYTEST = ["python", "-m", "pytest", "-n", "0", "-p", "no:cacheprovider", "-m", ""]
USAGE = {
    "rerun-test": "/rerun-test <file>[::Class.method] ...",
    "rerun-suite": "/rerun-suite <suite> [--runner LABEL] [--filter EXPR (rest of the line)]",
    "tag-and-rerun-ci": "/tag-and-rerun-ci",
    "rerun-sglang": "/rerun-sglang <release|commit>",
}
# /rerun-sglang dispatches the nightly SGLang-regression workflow on the default branch
# (the reference engine beside the mini engine, docs/reference.md) with this SGLang.
SGLANG_WORKFLOW = "nightly-sglang.yml"
SGLANG_RUNNER = "cpu"  # the workflow's runs-on: GitHub-hosted ubuntu-latest
SGLANG_COMMIT_RE = re.compile(r"[0-9a-f]{7,40}\Z", re.ASCII)


@dataclass
class Group:
    """One dispatch: tests (or a suite slice) on one runner, and how it is going."""

    runner: str
    tests: list[str] = field(default_factory=list)
    suite: str | None = None
    filter: str | None = None
    sglang: str | None = None  # /rerun-sglang: the SGLang release or commit the nightly installs
    status: str = "queued"
    run_url: str = ""
    mlflow: list[str] = field(default_factory=list)
    table: str = ""
    note: str = ""

    def argv(self, run_id: str = "RUN_ID") -> list[str]:
        if self.sglang is not None:  # where the ref reaches a command in the nightly job
            return ["kvbench", "ci", "sglang-requirement", self.sglang]
        # `-m ""` lifts the default 'not gpu' deselection: a rerun asked for these tests.
        if self.suite is None:
            return PYTEST + self.tests
        argv = ["kvbench", "sweep", self.suite, "--run-id", run_id]
        return argv + (["--filter", self.filter] if self.filter else [])

    def command(self) -> str:
        if self.sglang is not None:  # the nightly job's steps, with this SGLang installed
            return "\n".join([f"{SGLANG_WORKFLOW}: pip install \"$(kvbench ci sglang-requirement {self.sglang})\"",
                              *(f"kvbench conform --engine --suite {s}" for s in ("smoke", "invariants"))])
        return shlex.join(self.argv())


@dataclass
class Comment:
    body: str
    user: str
    association: str
    pr: int
    pr_author: str
    is_pull: bool = True


@dataclass
class Plan:
    command: str | None  # None: not addressed to the bot, nothing to do
    user: str = ""
    pr: int = 0
    groups: list[Group] = field(default_factory=list)
    refusal: str | None = None
    head: str = ""  # the pull request's commit the groups run (the one whose tests were checked)
    notes: list[str] = field(default_factory=list)

    @property
    def accepted(self) -> bool:
        return self.command is not None and self.refusal is None


def safe_login(login: str) -> str:
    return login if LOGIN_RE.match(login or "") else "unknown-user"


def _rerun_test(args: list[str], repo_tree: Path, registry: Registry, perms: Permissions, grant) -> list[Group]:
    if not args:
        raise Refusal(f"no test given; usage: `{USAGE['rerun-test']}`")
    if len(args) > perms.max_specs:
        raise Refusal(f"too many specs: {len(args)} given, at most {perms.max_specs} per comment")
    groups: dict[str, Group] = {}
    seen: set[str] = set()
    for token in args:
        spec = specs.parse_test_spec(token, repo_tree)
        if spec.node_id in seen:
            continue
        seen.add(spec.node_id)
        try:
            if spec.test:
                split = {registry.runner_for_test(repo_tree, spec.file, spec.test): [spec.node_id]}
            else:
                # A whole file goes to every runner its tests ask for, each with its own tests.
                split = registry.runners_for_file(repo_tree, spec.file)
                split = {label: [f"{spec.file}::{t}" for t in tests] if len(split) > 1 else [spec.file]
                         for label, tests in split.items()}
        except HarnessError as err:
            raise Refusal(str(err)) from None
        for label, node_ids in split.items():
            if not grant.allows("rerun-test", label):
                raise Refusal(f"no permission to run on runner `{label}` (needed by {node_ids[0]})")
            group = groups.setdefault(label, Group(label))
            group.tests += [n for n in node_ids if n not in group.tests]
    return list(groups.values())


def _rerun_suite(args: list[str], registry: Registry, grant, suites: list[str], suite_root: Path) -> list[Group]:
    if not args or args[0].startswith("-"):
        raise Refusal(f"no suite given; usage: `{USAGE['rerun-suite']}`")
    suite = specs.check_suite(args[0], suites)
    runner, expr = None, None
    rest = args[1:]
    while rest:
        opt = rest.pop(0)
        if opt not in ("--runner", "--filter"):
            raise Refusal(f"unknown option {show(opt)}; usage: `{USAGE['rerun-suite']}`")
        if not rest:
            raise Refusal(f"{opt} needs a value")
        if opt == "--filter":
            # The expression is the rest of the line: -k needs spaces around and/or/not.
            expr, rest = specs.check_filter(" ".join(rest)), []
            continue
        value = rest.pop(0)
        if value not in registry.runners:
            raise Refusal(f"unknown runner {show(value)}; known: {', '.join(registry.labels)}")
        runner = value
    runner = runner or registry.runner_for_suite(suite)
    if not grant.allows("rerun-suite", runner):
        raise Refusal(f"no permission to run on runner `{runner}`")
    if expr:  # a filter that selects nothing is refused now, not by the sweep on the runner
        check_selects(suite_root / "suites" / f"{suite}.toml", suite, expr)
    return [Group(runner, suite=suite, filter=expr)]


def check_sglang_ref(args: list[str]) -> str:
    """One SGLang release (0.5.23, 0.5.24.post1, 0.6.0rc1) or commit (7 to 40 lowercase hex
    digits); branch and tag names, which the workflow takes when dispatched by hand, are
    refused here: they move, so a comment would not name what ran."""
    if len(args) != 1:
        got = f"got {show(' '.join(args))}" if args else "none given"
        raise Refusal(f"give one SGLang release or commit ({got}); usage: `{USAGE['rerun-sglang']}`")
    ref = args[0]
    if not (RELEASE.match(ref) or SGLANG_COMMIT_RE.match(ref)):
        raise Refusal(f"SGLang ref {show(ref)} is neither a release (0.5.23, 0.5.24.post1) "
                      f"nor a commit (7 to 40 lowercase hex digits)")
    return ref


def _rerun_sglang(args: list[str], grant) -> list[Group]:
    ref = check_sglang_ref(args)
    if not grant.allows("rerun-sglang", SGLANG_RUNNER):
        raise Refusal(f"no permission to run on runner `{SGLANG_RUNNER}`")
    note = ("the default branch's code against this SGLang; what it would file is in the run's "
            "job summary (the workflow reports to no reply)")
    return [Group(SGLANG_RUNNER, sglang=ref, note=note)]


def plan_comment(
    comment: Comment,
    repo_tree: Path,
    registry: Registry,
    perms: Permissions,
    suites: list[str] | None = None,
    suite_root: Path | None = None,
) -> Plan:
    """Every outcome is a Plan: ignored (command None), refused (with reason) or runnable.
    ``suites``: the suite names known under ``suite_root`` (default ``repo_tree``)."""
    line = specs.first_line(comment.body)
    if not line or line[0] not in SLASHES:
        return Plan(None)
    user = safe_login(comment.user)
    plan = Plan("?", user=user, pr=comment.pr)
    if "\n" in comment.body.strip().replace("\r", "\n"):
        plan.notes.append("only the first line of a comment is read")
    try:
        specs.check_line(line)
        words = line.split()
        name = words[0][1:]
        if name not in COMMANDS:
            raise Refusal(f"unknown command {show(words[0])}; known: {', '.join('/' + c for c in COMMANDS)}")
        plan.command = name
        if not comment.is_pull:
            raise Refusal("bot commands work on pull requests only")
        grant = perms.grant(comment.user, comment.association, comment.user.lower() == comment.pr_author.lower())
        if not grant.allows(name):
            raise Refusal(f"@{user} has no permission for /{name}")
        args = words[1:]
        if name == "rerun-test":
            plan.groups = _rerun_test(args, repo_tree, registry, perms, grant)
        elif name == "rerun-suite":
            plan.groups = _rerun_suite(args, registry, grant, suites or [], suite_root or repo_tree)
        elif name == "rerun-sglang":
            plan.groups = _rerun_sglang(args, grant)
        elif args:
            raise Refusal(f"/{name} takes no arguments (got {show(' '.join(args))})")
    except Refusal as err:
        plan.refusal = str(err)
        plan.groups = []
    return plan


def known_suites(root: Path) -> list[str]:
    """Suite grids are suites/<name>.toml."""
    return sorted(p.stem for p in (root / "suites").glob("*.toml") if specs.SUITE_RE.match(p.stem))
