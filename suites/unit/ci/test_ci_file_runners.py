"""A whole test file (`/rerun-test FILE`, `kvbench ci runners FILE`, `ci rerun-args`) is
asked of every test in it: function and class runner marks count as they do for one
test, so a file is never sent to a runner one of its tests may not run on."""

from __future__ import annotations

import json

import pytest

from harness.ci import reply
from harness.ci.bot import Comment, plan_comment
from harness.ci.rerun import rerun_argv
from harness.core.errors import UsageError

H200 = "import pytest\n\n\n@pytest.mark.runner('1-gpu-h200')\ndef test_h():\n    pass\n"
MIXED = ("import pytest\n\n\ndef test_a():\n    pass\n\n\n"
         "@pytest.mark.runner('8-gpu-h200')\nclass TestX:\n    def test_n(self):\n        pass\n\n"
         "    def test_m(self):\n        pass\n\n\n"
         "class TestY:\n    @pytest.mark.runner('1-gpu-h100')\n    def test_g(self):\n        pass\n\n"
         "    def test_c(self):\n        pass\n")


@pytest.fixture
def files(setup):
    root, registry, perms = setup
    (root / "suites" / "gpu" / "test_h200.py").write_text(H200)
    (root / "suites" / "unit" / "test_mixed.py").write_text(MIXED)
    return root, registry, perms


def _plan(files, comment: str, association: str = "MEMBER", user: str = "core-dev"):
    root, registry, perms = files
    return plan_comment(Comment(comment, user, association, 5, user), root, registry, perms, ["smoke"])


def test_a_file_whose_one_test_is_marked_runs_where_that_test_does(files):
    root, registry, _ = files
    assert registry.runner_for_test(root, "suites/gpu/test_h200.py") == "1-gpu-h200"  # not the [[files]] rule's h100
    plan = _plan(files, "/rerun-test suites/gpu/test_h200.py")
    assert [(g.runner, g.tests) for g in plan.groups] == [("1-gpu-h200", ["suites/gpu/test_h200.py"])]


def test_a_mixed_file_is_split_by_runner_and_each_test_named(files):
    plan = _plan(files, "/rerun-test suites/unit/test_mixed.py")
    assert plan.refusal is None
    assert {g.runner: g.tests for g in plan.groups} == {
        "cpu": ["suites/unit/test_mixed.py::test_a", "suites/unit/test_mixed.py::TestY::test_c"],
        "8-gpu-h200": ["suites/unit/test_mixed.py::TestX"],  # a class on one runner is named once
        "1-gpu-h100": ["suites/unit/test_mixed.py::TestY::test_g"],
    }
    assert "8-gpu-h200" in reply.render(plan)


def test_a_contributor_refused_for_a_class_is_refused_for_its_file(files):
    for spec in ("suites/unit/test_mixed.py::TestX::test_n", "suites/unit/test_mixed.py", "test_mixed.py"):
        plan = _plan(files, f"/rerun-test {spec}", association="CONTRIBUTOR")
        assert plan.refusal and "8-gpu-h200" in plan.refusal, (spec, plan.refusal)
    assert _plan(files, "/rerun-test suites/unit/test_mixed.py::test_a", association="CONTRIBUTOR").refusal is None


def test_ci_runners_names_every_runner_of_a_file(files, cli, capsys):
    root = files[0]
    assert cli("ci", "runners", "suites/gpu/test_h200.py", "suites/unit/test_mixed.py", "--root", root) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == ["suites/gpu/test_h200.py 1-gpu-h200",
                   "suites/unit/test_mixed.py cpu test_a TestY::test_c",
                   "suites/unit/test_mixed.py 8-gpu-h200 TestX",
                   "suites/unit/test_mixed.py 1-gpu-h100 TestY::test_g"]


def test_rerun_args_refuses_a_mixed_file_on_one_runner(files):
    root, registry, _ = files
    with pytest.raises(UsageError, match=r"test_mixed.py: its tests run on 3 runners .*8-gpu-h200: TestX"):
        rerun_argv(registry, root, root, "cpu", json.dumps(["suites/unit/test_mixed.py"]), "", "", "r1")
    with pytest.raises(UsageError, match="runs on `1-gpu-h200`, not on `1-gpu-h100`"):
        rerun_argv(registry, root, root, "1-gpu-h100", json.dumps(["suites/gpu/test_h200.py"]), "", "", "r1")
    # What the bot dispatches for the split file passes the re-check, group by group.
    for group in _plan(files, "/rerun-test suites/unit/test_mixed.py").groups:
        assert rerun_argv(registry, root, root, group.runner, json.dumps(group.tests), "", "", "r1")[-len(group.tests):] \
            == group.tests
