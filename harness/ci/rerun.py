"""Turn the rerun workflow's inputs back into a command, checking them all again.

The bot validated them before dispatching, but a workflow can also be dispatched by
hand, so the workflow's first (trusted) job re-checks everything here: each test id
against the tree and the allow-list, each test's runner against the requested label,
the suite, the filter and the run id. The output is a JSON argv run without a shell.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from harness.ci import specs
from harness.ci.bot import Group, known_suites
from harness.ci.runners import Registry
from harness.ci.specs import Refusal, show
from harness.ci.suite_filter import check_selects
from harness.core.errors import UsageError

RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z", re.ASCII)
SHA_RE = re.compile(r"[0-9a-f]{40}\Z", re.ASCII)
MAX_TESTS = 100


def check_sha(sha: str, option: str) -> str:
    if not SHA_RE.match(sha or ""):
        raise UsageError(f"{option} must be a 40-character commit id in lowercase hex (got {show(str(sha))})")
    return sha


def rerun_argv(registry: Registry, tree: Path, root: Path, runner: str, tests_json: str,
               suite: str, expr: str, run_id: str) -> list[str]:
    registry.get(runner)
    if not RUN_ID_RE.match(run_id):
        raise UsageError(f"--run-id must be letters, digits, '.', '_' or '-' (got {show(run_id)})")
    try:
        tests = json.loads(tests_json or "[]")
    except json.JSONDecodeError:
        raise UsageError("--tests must be a JSON list of test ids") from None
    if not isinstance(tests, list) or not all(isinstance(t, str) for t in tests):
        raise UsageError("--tests must be a JSON list of test ids")
    if bool(tests) == bool(suite):
        raise UsageError("give either --tests (a non-empty list) or --suite, not both")
    if tests and expr:
        # A filter selects configs of a suite's grid; tests given by id would run unfiltered.
        raise UsageError("--filter applies to --suite only (got --tests and --filter)")
    try:
        if suite:
            group = Group(runner, suite=specs.check_suite(suite, known_suites(root)),
                          filter=specs.check_filter(expr) if expr else None)
            if group.filter:  # refused here, not by the sweep once a runner has started
                check_selects(root / "suites" / f"{group.suite}.toml", group.suite, group.filter)
            return group.argv(run_id)
        if len(tests) > MAX_TESTS:
            raise UsageError(f"--tests: at most {MAX_TESTS} test ids (got {len(tests)})")
        ids = []
        for token in tests:
            spec = specs.parse_test_spec(token, tree)
            want = registry.runner_for_test(tree, spec.file, spec.test)
            if want != runner:
                raise UsageError(f"--tests: {show(spec.node_id, 200)} runs on {show(want)}, not on {show(runner)}")
            ids.append(spec.node_id)
        return Group(runner, tests=ids).argv(run_id)
    except Refusal as err:
        raise UsageError(str(err)) from None
