"""A rerun whose --filter selects no config of its suite is refused before anything is
dispatched (`kvbench ci rerun-args`, the bot's `/rerun-suite`), in one line, without
numpy (the ``ci`` install role has none), and exactly where the sweep itself would
refuse it (reliability.md L8: it used to start a runner first)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from faultkit import REPO
from harness.ci.bot import Comment, plan_comment
from harness.ci.permissions import load_permissions
from harness.ci.runners import load_registry
from harness.ci.specs import Refusal
from harness.ci.suite_filter import check_selects

ARGS = ("ci", "rerun-args", "--runner", "cpu", "--run-id", "r1", "--root", REPO, "--suite", "smoke")
# numpy and torch made unimportable, as in an install of the ci role alone
NO_NUMPY = ("import sys\nsys.modules['numpy'] = sys.modules['torch'] = None\n"
            "from harness.cli import main\nsys.exit(main(sys.argv[1:]))\n")


@pytest.mark.parametrize("expr", ["spec:medusa", "ps:2", "spec:dflash and spec:eagle", "window:32 and ps:16"])
def test_rerun_args_refuses_a_filter_that_selects_nothing(expr, cli, capsys):
    assert cli(*ARGS, "--filter", expr) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert "--filter" in err and "selects no config of suite smoke" in err


def test_rerun_args_keeps_a_filter_that_selects(cli, capsys):
    assert cli(*ARGS, "--filter", "spec:dflash and ps:16 and not window:64") == 0
    assert '"--filter", "spec:dflash and ps:16 and not window:64"' in capsys.readouterr().out


def test_the_check_needs_no_numpy(tmp_path):
    def run(expr: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", NO_NUMPY, *map(str, ARGS), "--filter", expr], cwd=tmp_path,
                              env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True)

    refused = run("spec:medusa")
    assert refused.returncode == 2 and "selects no config of suite smoke" in refused.stderr, refused.stderr
    assert refused.stderr.count("\n") == 1
    kept = run("spec:eagle and ps:64")
    assert kept.returncode == 0 and "spec:eagle and ps:64" in kept.stdout, kept.stderr


def test_the_bot_refuses_it_before_dispatching():
    registry = load_registry(REPO / "ci" / "runners.toml")
    perms = load_permissions(REPO / "ci" / "permissions.json", registry.labels)

    def plan(body: str):
        return plan_comment(Comment(body, "core-dev", "MEMBER", 42, "core-dev"), REPO, registry, perms, ["smoke"], REPO)

    refused = plan("/rerun-suite smoke --filter spec:dflash and ps:2")
    assert refused.groups == [] and "selects no config of suite smoke" in refused.refusal
    assert "\n" not in refused.refusal
    kept = plan("/rerun-suite smoke --filter spec:dflash and ps:16")
    assert kept.refusal is None and kept.groups[0].filter == "spec:dflash and ps:16"


WORDS = st.sampled_from(["spec:dflash", "spec:eagle", "spec:medusa", "ps:1", "ps:2", "ps:16", "ps:64", "window:64",
                         "window:none", "profile:floor-free", "free_policy:dedup", "model:tiny", "bs:4", "bs:16",
                         "steps:3", "dflash", "eagle", "tiny", "nothing"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(words=st.lists(st.tuples(st.sampled_from(["", "not "]), WORDS), min_size=1, max_size=4),
       ops=st.lists(st.sampled_from(["and", "or"]), min_size=3, max_size=3))
def test_it_refuses_exactly_what_the_sweep_refuses(words, ops):
    """The stdlib reading of the grid agrees with the sweep's own (pydantic, engine) one."""
    from harness.grid.suites import load_suite
    from harness.grid.sweep import SweepError, check_filter

    expr = " ".join(f"{op} {neg}{w}" if i else f"{neg}{w}" for i, ((neg, w), op) in enumerate(zip(words, ops)))
    try:
        sweep = check_filter(expr, load_suite("smoke", validate=False))
    except SweepError:
        sweep = 0
    try:
        ours = check_selects(REPO / "suites" / "smoke.toml", "smoke", expr)
    except Refusal:
        ours = 0
    assert ours == sweep, expr
