"""The bot under hostile input: damaged results artifacts never crash `bot report`
(the group ends "failed: artifact unreadable", not "running" for good), and no text a
pull request, an artifact, a comment or GitHub echoes renders as markdown, HTML, an
image, a link or a mention in anything the bot posts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from faultkit import REPO
from mdcheck import cells_per_row, live
from harness.ci import reply
from harness.ci.bot import Comment, Group, Plan, plan_comment
from harness.ci.github_client import GitHubError
from harness.ci.handle import handle_event
from harness.ci.permissions import load_permissions
from harness.ci.recording import RecordingClient
from harness.ci.runners import load_registry

PAYLOAD = "x\n# Heading\n![img](https://evil.example/x.png) [link](https://evil.example) @org/team <img src=x> `t` | p"
# The bot's own links: to checked http(s) URLs of these tests.
OWN_LINKS = ("https://mlflow.example", "https://github.com/o/r/actions/runs/7")


def assert_inert(body: str, user: str = "") -> None:
    """The state comment first and once; then, parsed as GitHub parses it, nothing that
    renders as a heading, image, link (but the bot's own), HTML, autolink or mention
    (but of the commenter), and every table row as many cells as its header."""
    first, _, rest = body.partition("\n")
    assert first.startswith("<!-- kvbench-bot {") and first.endswith("} -->") and first.count("-->") == 1
    assert not live(body, links=OWN_LINKS, mention=user, html=("<!-- kvbench-bot {",)), body
    assert len(set(cells_per_row(body))) <= 1, body


# -- damaged artifacts ---------------------------------------------------------------

DEEP = "[" * 50_000 + "]" * 50_000
DAMAGED = {
    "binary": b"\x00\xff\xfe\x80garbage\n",
    "deep list": (DEEP + "\n").encode(),
    "deep object": ('{"key": "k", "metrics": ' + '{"a": ' * 50_000 + "1" + "}" * 50_000 + "}\n").encode(),
    "a list per line": b"[1, 2]\n",
    "markdown in the test id": (json.dumps({"key": "k", "test_id": PAYLOAD, "metrics": {}}) + "\n").encode(),
    "a mention in the key": (json.dumps({"key": "@org/team", "metrics": {}}) + "\n").encode(),
    "metrics a string": (json.dumps({"key": "k", "metrics": "lots"}) + "\n").encode(),
    "a NaN counter": b'{"key": "k", "metrics": {"peak_pages_held": NaN}}\n',
    "html in a metric name": (json.dumps({"key": "k", "metrics": {"<img src=x>": 1}}) + "\n").encode(),
}


def _report(tmp_path: Path, cli, capsys, results: Path, *extra) -> str:
    plan = Plan("rerun-suite", user="core-dev", pr=3, groups=[Group("cpu", suite="smoke")])
    body = tmp_path / "reply.md"
    body.write_text(reply.render(plan))
    code = cli("bot", "report", "--dry-run", "--body-file", body, "--comment-id", 1, "--group", 1,
               "--result", "success", "--results", results, "--root", REPO, *extra)
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


@pytest.mark.parametrize("name", sorted(DAMAGED))
def test_a_damaged_artifact_fails_the_group_without_a_crash(name, tmp_path, cli, capsys):
    results = tmp_path / "run"
    results.mkdir()
    (results / "results.jsonl").write_bytes(DAMAGED[name])
    out = _report(tmp_path, cli, capsys, results, "--baseline", REPO / "results" / "baselines" / "cpu.json")
    group = reply.parse(out).groups[0]
    assert group.status == "failed" and "failed: artifact unreadable" in group.table, group.table
    assert_inert(out, "core-dev")


@pytest.mark.parametrize("meta", [b"[]", b'"text"', b"\x00\xff", ("{" * 50_000).encode(), b'{"mlflow_parent": "@org/x"}'])
def test_an_odd_meta_json_costs_only_the_mlflow_link(meta, tmp_path, cli, capsys):
    results = tmp_path / "run"
    results.mkdir()
    (results / "results.jsonl").write_text(json.dumps({"key": "spec=none,ps=1", "test_id": "ps:1",
                                                       "metrics": {"leaked_pages": 0}, "status": "ok",
                                                       "verdict": "ok"}) + "\n")
    (results / "meta.json").write_bytes(meta)
    out = _report(tmp_path, cli, capsys, results, "--mlflow-url", "https://mlflow.example")
    group = reply.parse(out).groups[0]
    assert group.status == "passed" and group.mlflow == ["https://mlflow.example"]
    assert_inert(out, "core-dev")


# -- injection through every text the bot posts ---------------------------------------

@pytest.fixture
def tree(tmp_path: Path):
    root = tmp_path / "repo"
    (root / "suites" / "unit").mkdir(parents=True)
    shutil.copytree(REPO / "ci", root / "ci", ignore=shutil.ignore_patterns("workflows"))
    (root / "suites" / "smoke.toml").write_text("")
    registry = load_registry(root / "ci" / "runners.toml")
    perms = load_permissions(root / "ci" / "permissions.json", registry.labels)
    return root, registry, perms


def _event(body: str, user: str = "core-dev") -> dict:
    return {"action": "created", "issue": {"number": 42, "pull_request": {"url": "https://api.github.com/pulls/42"},
                      "user": {"login": user}},
            "comment": {"body": body, "user": {"login": user}, "author_association": "MEMBER"},
            "repository": {"default_branch": "main"}}


class HostileGitHub(RecordingClient):
    """GitHub echoing text someone else wrote: run names from a pull request's workflow
    file, error messages quoting inputs."""

    def __init__(self, text: str):
        super().__init__()
        self.text = text

    def dispatch_workflow(self, workflow, ref, inputs):
        super().dispatch_workflow(workflow, ref, inputs)
        raise GitHubError(self.text)

    def failed_runs(self, head_sha):
        super().failed_runs(head_sha)
        return [{"id": 7, "name": self.text, "url": "https://github.com/o/r/actions/runs/7"},
                {"id": 8, "name": "ok", "url": "javascript:alert(1)//" + self.text}]


def _texts(text: str, tree) -> list[str]:
    """Every reply the bot posts with ``text`` in a place it can come from."""
    root, registry, perms = tree
    mark = root / "suites" / "unit" / "test_evil.py"
    mark.write_text(f"import pytest\n\n\n@pytest.mark.runner({text!r})\ndef test_a():\n    pass\n")
    bodies = []
    client = RecordingClient()
    out = handle_event(_event("/rerun-test suites/unit/test_evil.py::test_a"), client, root, root, registry, perms)
    bodies.append(client.comments[out.reply_id])  # the runner mark of a pull request's file
    line = " ".join(text.split())  # a comment's first line: the bot reads no more
    word = "".join(text.split())  # one word of it
    for comment in (f"/rerun-suite smoke --runner {word}", f"/rerun-suite smoke --filter {line}",
                    f"/rerun-suite {word}", f"/rerun-test {word}", f"/rerun-test suites/unit/{word}",
                    f"/{word}", f"/tag-and-rerun-ci {line}", f"/rerun-sglang {word}"):
        plan = plan_comment(Comment(comment, "core-dev", "MEMBER", 42, "core-dev"), root, registry, perms, ["smoke"])
        if plan.command is not None:
            bodies.append(reply.render(plan))  # the comment's own words echoed in a refusal
    gh = HostileGitHub(text)
    out = handle_event(_event("/rerun-suite smoke"), gh, root, root, registry, perms)
    bodies.append(gh.comments[out.reply_id])  # a dispatch error quoting what was sent
    out = handle_event(_event("/tag-and-rerun-ci"), gh, root, root, registry, perms)
    bodies.append(gh.comments[out.reply_id])  # the names of a pull request's workflow runs
    return bodies


def test_markdown_and_mentions_are_inert_in_every_reply(tree):
    bodies = _texts(PAYLOAD, tree)
    assert len(bodies) >= 6
    for body in bodies:
        assert_inert(body, "core-dev")
        assert len(body) < 4000


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(alphabet=st.sampled_from(list("ab@#!<>[]()`*_|\\\n -/:.")) , min_size=1, max_size=80))
def test_any_text_is_inert_in_every_reply(tree, text):
    for body in _texts(text, tree):
        assert_inert(body, "core-dev")
