"""`kvbench ci lint` on the injection patterns it once missed, and on workflow trees that
are not what they should be (jobs as a list, invalid YAML, a suites/ linking to `/`).
Each unsafe workflow is flagged; its safe twin is not."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from harness.ci import workflows
from harness.commands.ci import lint

REPO = Path(__file__).resolve().parents[3]
STEPS = "jobs:\n  t:\n    runs-on: ubuntu-latest\n{perms}    steps:\n"
PRT = "on: pull_request_target\n" + STEPS.format(perms="")
COMMENT = "on: issue_comment\n" + STEPS.format(perms="")
# (workflow, a word of the problem, the same workflow made safe)
CASES = {
    "prt checkout of the merge commit": (
        PRT + "      - uses: actions/checkout@v4\n        with:\n"
        "          ref: ${{ github.event.pull_request.merge_commit_sha }}\n      - run: make\n",
        "pull_request_target", ("merge_commit_sha", "github.sha")),
    "prt gh pr checkout": (
        PRT + "      - uses: actions/checkout@v4\n      - run: gh pr checkout \"$PR\" && make\n"
        "        env:\n          PR: ${{ github.event.number }}\n",
        "gh pr checkout", ('gh pr checkout "$PR" && ', "")),
    "prt git fetch of the head": (
        PRT + "      - run: |\n          git fetch origin \"pull/$PR/head\"\n          git checkout FETCH_HEAD\n"
        "        env:\n          PR: ${{ github.event.number }}\n",
        "pull/$PR/head", ("pull/$PR/head", "main")),
    "workflow_run runs a downloaded artifact": (
        "on:\n  workflow_run:\n    workflows: [ci]\n    types: [completed]\npermissions: write-all\n"
        + STEPS.format(perms="") + "      - uses: actions/download-artifact@v4\n        with:\n          name: out\n"
        "          path: artifact\n      - run: bash ./artifact/script.sh\n",
        "downloaded artifact", ("permissions: write-all", "permissions:\n  contents: read")),
    "workflow_run runs an artifact unpacked in the workspace": (
        "on:\n  workflow_run:\n    workflows: [ci]\n    types: [completed]\n"
        + STEPS.format(perms="    permissions:\n      pull-requests: write\n")
        + "      - uses: actions/download-artifact@v4\n      - run: ./post.sh\n",
        "downloaded artifact", ("./post.sh", "cat post.sh")),
    "comment body into GITHUB_ENV": (
        COMMENT + "      - run: echo \"BODY=$BODY\" >> \"$GITHUB_ENV\"\n        env:\n"
        "          BODY: ${{ github.event.comment.body }}\n",
        "$GITHUB_ENV", ("github.event.comment.body", "github.event.comment.id")),
    "comment body into GITHUB_OUTPUT": (
        COMMENT + "      - run: |\n          echo \"text=${BODY}\" >> $GITHUB_OUTPUT\n        env:\n"
        "          BODY: ${{ github.event.comment.body }}\n",
        "$GITHUB_OUTPUT", ("github.event.comment.body", "github.event.comment.id")),
    "github-script with a discussion comment": (
        "on: discussion_comment\n" + STEPS.format(perms="") + "      - uses: actions/github-script@v7\n"
        "        with:\n          script: core.info(`${{ github.event.discussion_comment.body }}`)\n",
        "github-script", ("${{ github.event.discussion_comment.body }}", "${process.env.BODY}")),
    "github-script with the committer's name": (
        "on: push\n" + STEPS.format(perms="") + "      - uses: actions/github-script@v7\n"
        "        with:\n          script: core.info('${{ github.event.head_commit.committer.name }}')\n",
        "github-script", ("github.event.head_commit.committer.name", "github.sha")),
    "github-script with an env set from the comment": (
        COMMENT + "      - uses: actions/github-script@v7\n        env:\n"
        "          BODY: ${{ github.event.comment.body }}\n        with:\n"
        "          script: core.info('${{ env.BODY }}')\n",
        "env BODY", ("'${{ env.BODY }}'", "process.env.BODY")),
}


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(REPO / "ci", root / "ci")
    (root / "suites").mkdir()
    return root


def _problems(root: Path, name: str) -> list[str]:
    return [p for p in lint(root) if p.startswith(name)]


@pytest.mark.parametrize("case", sorted(CASES))
def test_lint_flags_each_injection_pattern(case, tmp_path):
    text, needle, (unsafe, safe) = CASES[case]
    root = _tree(tmp_path)
    workflow = root / "ci" / "workflows" / "unsafe.yml"
    workflow.write_text(text)
    found = _problems(root, "unsafe.yml")
    assert found and any(needle in p for p in found), found
    assert unsafe in text
    workflow.write_text(text.replace(unsafe, safe))
    assert not _problems(root, "unsafe.yml"), text.replace(unsafe, safe)


def test_yaml_spelling_is_read_too(tmp_path):
    root = _tree(tmp_path)
    text = CASES["comment body into GITHUB_ENV"][0]
    (root / "ci" / "workflows" / "unsafe.yaml").write_text(text)
    assert _problems(root, "unsafe.yaml")


@pytest.mark.parametrize("text, needle", [
    ("on: push\njobs:\n  - runs-on: ubuntu-latest\n    steps: []\n", "jobs: must be a mapping"),
    ("on: push\njobs: {t: [1, 2]}\n", "jobs: must be a mapping"),
    ("on: push\njobs:\n  t: {runs-on: x\n", "not valid YAML (line"),
    ("on: !!python/object/apply:os.system ['true']\n", "not valid YAML (line 1"),
    ("\xff\xfe", "not UTF-8 text"),
])
def test_a_malformed_workflow_is_one_line(text, needle, tmp_path):
    root = _tree(tmp_path)
    (root / "ci" / "workflows" / "odd.yml").write_text(text, encoding="latin-1")
    found = _problems(root, "odd.yml")
    assert len(found) == 1 and needle in found[0] and "\n" not in found[0], found


@pytest.mark.parametrize("damage, reason", [
    ("missing", "not found"),
    ("directory", "a directory, not a regular file"),
    ("syntax", "not valid YAML (line 4, column 1): expected ',' or '}', but got '<stream end>'"),
    ("list", "a workflow is a mapping"),
])
def test_a_bad_workflow_file_is_one_line_naming_it(damage, reason, tmp_path):
    path = tmp_path / "odd.yml"
    if damage == "directory":
        path.mkdir()
    elif damage == "syntax":
        path.write_text("on: push\njobs:\n  t: {runs-on: x\n")
    elif damage == "list":
        path.write_text("- 1\n- 2\n")
    with pytest.raises(workflows.WorkflowError) as err:
        workflows.load(path)
    assert str(err.value) == f"workflow 'odd.yml': {reason}"


def test_a_suites_link_out_of_the_tree_is_not_walked(tmp_path):
    root = _tree(tmp_path)
    (root / "suites").rmdir()
    os.symlink("/", root / "suites")
    assert lint(root) == ["suites/: a symlink or not a directory; runner marks not checked"]


def test_the_shipped_workflows_pass_the_new_checks():
    # pr-cpu.yml runs `kvbench ci lint`, and test_ci_workflows asks lint(REPO) == []: this
    # names the injection module's share of that, so a weakened check shows here first.
    from harness.ci import workflow_injection, workflows

    files = sorted((REPO / "ci" / "workflows").glob("*.y*ml"))
    assert len(files) >= 5
    for path in files:
        assert workflow_injection.check(path, workflows.load(path)) == [], path.name
