"""The bot end to end on recorded issue_comment events, against a recording GitHub.

For every event: what it replies, what it dispatches, and that whatever reaches a
dispatch input is on the allow-list and survives the rerun workflow's re-validation.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.ci import reply
from harness.ci.handle import handle_event, report
from harness.ci.recording import RecordingClient
from harness.ci.rerun import rerun_argv

SAFE = re.compile(r"[A-Za-z0-9_./: +-]*\Z", re.ASCII)

# event -> (number of dispatches, refusal text or None, {runner: [test ids]} or None)
CASES = {
    "rerun_test_single": (1, None, {"cpu": ["suites/unit/test_alloc.py::TestPages::test_free"]}),
    "rerun_test_many": (5, None, {
        "cpu": ["suites/unit/test_alloc.py::TestPages::test_free", "suites/unit/test_alloc.py::test_extend"],
        "1-gpu-h100": ["suites/gpu/test_attention_gpu.py", "suites/bench/test_marked_gpu.py"],
        "8-gpu-h200": ["suites/gpu/multi/test_tp8.py::test_eight_ranks"],
        "1-gpu-h200": ["suites/invariants/test_swa_floor.py::test_floor"],
        "1-gpu-5090": ["suites/invariants/test_swa_floor.py::TestPD::test_prealloc"],
    }),
    "rerun_test_unknown_file": (0, "no such test file", None),
    "rerun_test_unknown_test": (0, "no test `TestPages::test_nothing`", None),
    "rerun_test_traversal": (0, "'..'", None),
    "rerun_test_traversal_prefix": (0, "'..'", None),
    "rerun_test_absolute": (0, "relative to the repository root", None),
    "rerun_test_metachar": (0, "contains SEMICOLON (`;`)", None),
    "rerun_test_subshell": (0, "contains DOLLAR SIGN", None),
    "rerun_test_backtick": (0, "contains GRAVE ACCENT", None),
    "rerun_test_overlong": (0, "at most 1000 are read", None),
    "rerun_test_too_many": (0, "too many specs: 21 given, at most 20", None),
    "rerun_test_multiline": (1, None, {"cpu": ["suites/unit/test_alloc.py::test_extend"]}),
    "rerun_test_fullwidth_slash": (0, "U+FF0F FULLWIDTH SOLIDUS", None),
    "rerun_test_cyrillic": (0, "U+0435 CYRILLIC SMALL LETTER IE", None),
    "rerun_test_fullwidth_command": (0, "U+FF0F FULLWIDTH SOLIDUS at column 1", None),
    "rerun_test_no_permission": (0, "@drive-by has no permission for /rerun-test", None),
    # The author's own pull request: the GitHub-hosted CPU runner only; GPU machines run
    # the author's code only for people granted a GPU role.
    "rerun_test_author": (0, "no permission to run on runner `1-gpu-h100`", None),
    "rerun_test_author_cpu": (1, None, {"cpu": ["suites/unit/test_alloc.py"]}),
    "rerun_test_gpu_tester": (2, None, {"cpu": ["suites/unit/test_alloc.py"],
                                        "1-gpu-h100": ["suites/gpu/test_attention_gpu.py"]}),
    "rerun_test_author_8gpu": (0, "no permission to run on runner `8-gpu-h200`", None),
    "rerun_test_first_timer": (0, "has no permission for /rerun-test", None),
    "rerun_test_symlink": (0, "no such test file", None),
    "rerun_test_ambiguous": (0, "is ambiguous", None),
    "rerun_test_empty": (0, "no test given", None),
    "unknown_command": (0, "unknown command `/rerun-everything`", None),
    "rerun_suite": (1, None, None),
    "rerun_suite_runner": (1, None, None),
    "rerun_suite_unknown_runner": (0, "unknown runner `4-gpu-a100`", None),
    "rerun_suite_bad_filter": (0, "--filter word `spec:dflash;reboot` is not allowed", None),
    "rerun_suite_hyphen_lookalike": (0, "U+2010 HYPHEN", None),
    "rerun_suite_unknown_suite": (0, "no suite `everything`", None),
    "rerun_suite_author": (0, "has no permission for /rerun-suite", None),
    "control_char": (0, "control character 0x1b", None),
    "on_issue": (0, "pull requests only", None),
    "tag_and_rerun_args": (0, "takes no arguments", None),
    # /rerun-sglang: a release or a commit only; a branch moves, so it is not what ran.
    "rerun_sglang_branch": (0, "SGLang ref `main` is neither a release (0.5.23, 0.5.24.post1) nor a commit", None),
    "rerun_sglang_uppercase": (0, "SGLang ref `3F2A9C1` is neither a release", None),
    "rerun_sglang_two_refs": (0, "give one SGLang release or commit (got `0.5.23 0.5.24`)", None),
    "rerun_sglang_empty": (0, "give one SGLang release or commit (none given)", None),
    "rerun_sglang_author": (0, "@pr-opener has no permission for /rerun-sglang", None),
}


def _check_inputs(inputs: dict, registry, tree: Path) -> None:
    """What a dispatch carries is allow-listed and re-validates in the workflow."""
    assert set(inputs) == {"runner", "tests", "suite", "filter", "pr", "reply_comment", "group", "sha"}
    assert re.fullmatch(r"[0-9a-f]{40}", inputs["sha"])
    assert inputs["runner"] in registry.runners
    tests = json.loads(inputs["tests"])
    for value in [*tests, inputs["suite"], inputs["filter"], inputs["pr"], inputs["reply_comment"], inputs["group"]]:
        assert SAFE.match(value), value
    for test in tests:
        assert test.startswith("suites/") and ".." not in test
        assert (tree / test.split("::")[0]).is_file()
    argv = rerun_argv(registry, tree, tree, inputs["runner"], inputs["tests"], inputs["suite"],
                      inputs["filter"], "rerun-1-1")
    assert all(SAFE.match(a) for a in argv if a), argv


@pytest.mark.parametrize("name", sorted(CASES))
def test_recorded_comment(name, setup, load_event):
    tree, registry, perms = setup
    dispatches, refusal, groups = CASES[name]
    client = RecordingClient()
    out = handle_event(load_event(name), client, tree, tree, registry, perms)

    sent = [c for c in client.calls if c[0] == "dispatch_workflow"]
    assert len(sent) == dispatches
    assert client.count("post_comment") == 1  # every command gets exactly one reply
    body = client.comments[out.reply_id]
    if refusal is None:
        assert out.plan.refusal is None
        assert [g.status for g in out.plan.groups] == ["queued"] * dispatches
        assert len(out.plan.groups) == dispatches  # one dispatch per runner group
    else:
        assert refusal in out.plan.refusal
        assert "cannot run" in body and refusal in body
    if groups is not None:
        assert {g.runner: g.tests for g in out.plan.groups} == groups
    for i, (_, workflow, ref, inputs) in enumerate(sent, 1):
        assert (workflow, ref) == ("rerun-test.yml", "main")
        assert inputs["group"] == str(i) and inputs["reply_comment"] == str(out.reply_id)
        _check_inputs(inputs, registry, tree)
    # The reply reads back as the same plan: later status updates start from it.
    assert [g.runner for g in reply.parse(body).groups] == [g.runner for g in out.plan.groups]


@pytest.mark.parametrize("name, ref", [("rerun_sglang_release", "0.5.24.post1"), ("rerun_sglang_commit", "3f2a9c1")])
def test_rerun_sglang_dispatches_the_nightly_with_the_ref(name, ref, setup, load_event):
    """The nightly SGLang-regression workflow on the default branch, its one input the
    checked ref (which the workflow turns into a pip requirement again); the pull
    request's head is not asked for, as the nightly does not run it."""
    from harness.ci.sglang_ref import requirement

    tree, registry, perms = setup
    client = RecordingClient()
    out = handle_event(load_event(name), client, tree, tree, registry, perms)
    assert out.plan.refusal is None
    assert [c for c in client.calls if c[0] == "dispatch_workflow"] == [
        ("dispatch_workflow", "nightly-sglang.yml", "main", {"sglang": ref})]
    assert client.count("pull_head_sha") == 0
    body = client.comments[out.reply_id]
    (group,) = reply.parse(body).groups
    assert (group.status, group.sglang) == ("dispatched", ref)
    assert f"kvbench ci sglang-requirement {ref}" in body and "kvbench conform --engine --suite invariants" in body
    assert requirement(ref) in (f"sglang=={ref}", f"sglang @ git+https://github.com/sgl-project/sglang@{ref}"
                                                  "#subdirectory=python")


def test_rerun_sglang_dispatch_failure_is_reported(setup, load_event):
    tree, registry, perms = setup
    client = RecordingClient(fail_dispatch=True)
    out = handle_event(load_event("rerun_sglang_release"), client, tree, tree, registry, perms)
    (group,) = reply.parse(client.comments[out.reply_id]).groups
    assert group.status == "error" and "dispatch failed" in group.note


def test_reply_lists_groups_with_commands(setup, load_event):
    tree, registry, perms = setup
    client = RecordingClient()
    out = handle_event(load_event("rerun_test_many"), client, tree, tree, registry, perms)
    body = client.comments[out.reply_id]
    for i, g in enumerate(out.plan.groups, 1):
        assert f"**{i}. runner `{g.runner}`** \u2014 \u23f3 queued" in body
        assert g.command() in body
    assert "python -m pytest -n 0 -p no:cacheprovider -m '' suites/gpu/test_attention_gpu.py" in body


def test_multiline_note_and_ignored_lines(setup, load_event):
    tree, registry, perms = setup
    client = RecordingClient()
    out = handle_event(load_event("rerun_test_multiline"), client, tree, tree, registry, perms)
    body = client.comments[out.reply_id]
    assert "only the first line of a comment is read" in body
    assert "passwd" not in body and "rm -rf" not in body


@pytest.mark.parametrize("name", ["not_a_command", "edited"])
def test_ignored_events_make_no_calls(name, setup, load_event):
    tree, registry, perms = setup
    client = RecordingClient()
    out = handle_event(load_event(name), client, tree, tree, registry, perms)
    assert out.plan.command is None and client.calls == []


def test_rerun_suite_plan(setup, load_event):
    tree, registry, perms = setup
    client = RecordingClient()
    out = handle_event(load_event("rerun_suite_runner"), client, tree, tree, registry, perms)
    (_, _, _, inputs), = [c for c in client.calls if c[0] == "dispatch_workflow"]
    assert inputs["suite"] == "nightly-gpu" and inputs["runner"] == "1-gpu-h100"
    assert inputs["filter"] == "spec:eagle or spec:dflash" and json.loads(inputs["tests"]) == []
    assert out.plan.groups[0].argv("r1") == ["kvbench", "sweep", "nightly-gpu", "--run-id", "r1",
                                             "--filter", "spec:eagle or spec:dflash"]
    default = handle_event(load_event("rerun_suite"), RecordingClient(), tree, tree, registry, perms)
    assert default.plan.groups[0].runner == "cpu"  # smoke is listed under cpu in ci/runners.toml


def test_tag_and_rerun(setup, load_event):
    tree, registry, perms = setup
    client = RecordingClient(heads={42: "ab" * 20})
    client.runs["ab" * 20] = [{"id": 7, "name": "pr-cpu", "url": "https://github.com/example/kvbench/actions/runs/7"},
                              {"id": 9, "name": "nightly-gpu", "url": "https://github.com/example/kvbench/actions/runs/9"}]
    out = handle_event(load_event("tag_and_rerun"), client, tree, tree, registry, perms)
    assert ("add_labels", 42, ("run-ci",)) in client.calls
    assert [c[1] for c in client.calls if c[0] == "rerun_failed_jobs"] == [7, 9]
    assert "rerunning failed jobs of `pr-cpu`" in client.comments[out.reply_id]


def test_dispatch_failure_is_reported_in_the_reply(setup, load_event):
    tree, registry, perms = setup
    client = RecordingClient(fail_dispatch=True)
    out = handle_event(load_event("rerun_test_many"), client, tree, tree, registry, perms)
    body = client.comments[out.reply_id]
    assert [g.status for g in reply.parse(body).groups] == ["error"] * 5
    assert "dispatch failed" in body


def test_status_updates_through_a_run(setup, load_event):
    tree, registry, perms = setup
    client = RecordingClient()
    out = handle_event(load_event("rerun_test_many"), client, tree, tree, registry, perms)
    url = "https://github.com/example/kvbench/actions/runs/55"
    report(client, out.reply_id, 2, "running", url)
    report(client, out.reply_id, 2, "passed", url, ["https://mlflow.example/#/runs/" + "a" * 32])
    report(client, out.reply_id, 4, "failed", url)
    body = client.comments[out.reply_id]
    assert [g.status for g in reply.parse(body).groups] == ["queued", "passed", "queued", "failed", "queued"]
    assert f"[workflow run]({url})" in body and "[MLflow](https://mlflow.example/#/runs/" in body


def test_cli_handle_dry_run(tree, load_event, tmp_path):
    event = tmp_path / "event.json"
    event.write_text(json.dumps(load_event("rerun_test_traversal")))
    kvbench = Path(sys.executable).parent / "kvbench"
    out = subprocess.run([kvbench, "bot", "handle", "--event", event, "--root", tree],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "refused" in out.stdout and "would call: post_comment" in out.stdout
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    out = subprocess.run([kvbench, "bot", "handle", "--event", bad, "--root", tree],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "bad.json': not valid JSON" in out.stderr
    assert "Traceback" not in out.stderr


_PR = {"number": 42, "user": {"login": "pr-opener"}, "pull_request": {"url": "u"}}
_COMMENT = {"body": "/rerun-test test_alloc.py", "user": {"login": "core-dev"}, "author_association": "MEMBER"}


@pytest.mark.parametrize("event", [
    {"issue": _PR, "comment": []},
    {"issue": _PR, "comment": "/rerun-test x"},
    {"issue": [], "comment": _COMMENT},
    {"issue": dict(_PR, user=None), "comment": _COMMENT},
    {"issue": _PR, "comment": dict(_COMMENT, user="core-dev")},
    {"issue": _PR, "comment": dict(_COMMENT, body=["/rerun-test x"])},
    {"issue": dict(_PR, number=-5), "comment": _COMMENT},
    {"issue": dict(_PR, number="42; id"), "comment": _COMMENT},
    {"issue": _PR, "comment": _COMMENT, "repository": ["main"]},
])
def test_malformed_events_are_one_line_errors(event, setup):
    from harness.ci.handle import EventError

    tree, registry, perms = setup
    client = RecordingClient()
    with pytest.raises(EventError, match="not an issue_comment payload") as err:
        handle_event(event, client, tree, tree, registry, perms)
    assert "\n" not in str(err.value) and client.calls == []


def test_cli_handle_event_path_is_a_directory(tree, tmp_path):
    kvbench = Path(sys.executable).parent / "kvbench"
    out = subprocess.run([kvbench, "bot", "handle", "--event", tmp_path, "--root", tree],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "': a directory, not a regular file" in out.stderr  # the one input-file rule: a regular file or nothing


def test_dispatch_pins_the_commit_the_bot_checked(setup, load_event):
    """A push after the comment must not change what runs: every group runs the commit
    whose tests the bot validated, not whatever the pull request's head is later."""
    tree, registry, perms = setup
    checked, later = "ab" * 20, "cd" * 20
    client = RecordingClient(heads={42: later})
    out = handle_event(load_event("rerun_test_many"), client, tree, tree, registry, perms, head_sha=checked)
    sent = [c[3] for c in client.calls if c[0] == "dispatch_workflow"]
    assert len(sent) == 5 and {inputs["sha"] for inputs in sent} == {checked}
    assert client.count("pull_head_sha") == 0
    assert f"`{checked[:12]}`" in client.comments[out.reply_id]
    assert reply.parse(client.comments[out.reply_id]).head == checked
    # Without a checked commit (a local dry run), the pull request's head now.
    client = RecordingClient(heads={42: later})
    handle_event(load_event("rerun_test_single"), client, tree, tree, registry, perms)
    assert [c[3]["sha"] for c in client.calls if c[0] == "dispatch_workflow"] == [later]


def test_bad_head_sha_is_an_error(setup, load_event):
    from harness.core.errors import UsageError

    tree, registry, perms = setup
    client = RecordingClient()
    with pytest.raises(UsageError, match="--head-sha must be a 40-character commit id"):
        handle_event(load_event("rerun_test_single"), client, tree, tree, registry, perms, head_sha="main")
    assert client.calls == []
