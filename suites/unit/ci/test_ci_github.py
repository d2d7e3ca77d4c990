"""The REST client builds the right calls (recorded transport, no network), and the
permission model grants what ci/permissions.json says and nothing more."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.ci.github_client import GitHubClient, GitHubError, check_repo
from harness.ci.permissions import load_permissions, parse_permissions
from harness.ci.runners import load_registry
from harness.core.errors import UsageError, HarnessError

REPO = Path(__file__).resolve().parents[3]


class Transport:
    def __init__(self, replies: list[tuple[int, object]]):
        self.replies = list(replies)
        self.sent: list[tuple[str, str, dict | None]] = []

    def __call__(self, method, path, payload):
        self.sent.append((method, path, payload))
        return self.replies.pop(0)


def test_rest_calls():
    t = Transport([(201, {"id": 5}), (200, {"body": "hi"}), (200, {}), (200, []), (204, None),
                   (200, {"head": {"sha": "c0ffee"}}),
                   (200, {"workflow_runs": [{"id": 3, "name": "pr-cpu", "html_url": "u"}]}), (201, {}),
                   (201, {"number": 12}), (200, {})])
    gh = GitHubClient("example/kvbench", send=t)
    assert gh.post_comment(42, "body") == 5
    assert gh.get_comment(5) == "hi"
    gh.update_comment(5, "new")
    gh.add_labels(42, ["run-ci"])
    gh.dispatch_workflow("rerun-test.yml", "main", {"runner": "cpu"})
    assert gh.pull_head_sha(42) == "c0ffee"
    assert gh.failed_runs("c0ffee") == [{"id": 3, "name": "pr-cpu", "url": "u"}]
    gh.rerun_failed_jobs(3)
    assert gh.open_issue("t", "b", ["kvbench-regression"]) == 12
    gh.update_issue(12, "b2", reopen=True)
    assert [(m, p) for m, p, _ in t.sent] == [
        ("POST", "/repos/example/kvbench/issues/42/comments"),
        ("GET", "/repos/example/kvbench/issues/comments/5"),
        ("PATCH", "/repos/example/kvbench/issues/comments/5"),
        ("POST", "/repos/example/kvbench/issues/42/labels"),
        ("POST", "/repos/example/kvbench/actions/workflows/rerun-test.yml/dispatches"),
        ("GET", "/repos/example/kvbench/pulls/42"),
        ("GET", "/repos/example/kvbench/actions/runs?head_sha=c0ffee&status=failure&per_page=100"),
        ("POST", "/repos/example/kvbench/actions/runs/3/rerun-failed-jobs"),
        ("POST", "/repos/example/kvbench/issues"),
        ("PATCH", "/repos/example/kvbench/issues/12"),
    ]
    assert t.sent[4][2] == {"ref": "main", "inputs": {"runner": "cpu"}}
    assert t.sent[9][2] == {"body": "b2", "state": "open"}


def test_find_issue_prefers_open_and_skips_pulls():
    items = [{"number": 1, "title": "T", "state": "closed", "body": "old"},
             {"number": 2, "title": "T", "state": "open", "pull_request": {}, "body": ""},
             {"number": 3, "title": "T", "state": "open", "body": "cur"}]
    gh = GitHubClient("example/kvbench", send=Transport([(200, items)]))
    assert gh.find_issue("T", "kvbench-regression")["number"] == 3
    gh = GitHubClient("example/kvbench", send=Transport([(200, items[:1])]))
    assert gh.find_issue("T", "kvbench-regression")["state"] == "closed"


def test_errors_are_one_line(monkeypatch):
    gh = GitHubClient("example/kvbench", send=Transport([(422, {"message": "Unexpected inputs provided"})]))
    with pytest.raises(GitHubError, match="dispatches failed: 422 Unexpected inputs provided"):
        gh.dispatch_workflow("rerun-test.yml", "main", {})
    with pytest.raises(GitHubError, match="workflow must be a file name"):
        gh.dispatch_workflow("../x.yml", "main", {})
    for bad in ("example", "a/b/c", "../x", "a b/c"):
        with pytest.raises(HarnessError, match="OWNER/NAME"):
            check_repo(bad)
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    with pytest.raises(HarnessError, match="GITHUB_TOKEN is not set"):
        GitHubClient("example/kvbench")


def _perms(**over):
    data = json.loads((REPO / "ci" / "permissions.json").read_text())
    data.update(over)
    labels = load_registry(REPO / "ci" / "runners.toml").labels
    return parse_permissions(data, labels=labels)


def test_real_permissions_file():
    labels = load_registry(REPO / "ci" / "runners.toml").labels
    perms = load_permissions(REPO / "ci" / "permissions.json", labels)
    member = perms.grant("core-dev", "MEMBER", False)
    assert member.allows("rerun-suite", "8-gpu-h200") and member.allows("tag-and-rerun-ci")
    author = perms.grant("pr-opener", "CONTRIBUTOR", True)
    assert author.allows("rerun-test", "cpu") and not author.allows("rerun-test", "1-gpu-h100")
    assert not author.allows("rerun-suite") and not author.allows("tag-and-rerun-ci")
    assert perms.grant("pr-opener", "CONTRIBUTOR", False).commands == frozenset()
    assert perms.grant("pr-opener", "FIRST_TIME_CONTRIBUTOR", True).commands == frozenset()
    assert perms.grant("drive-by", "NONE", False).commands == frozenset()


def test_explicit_users_add_roles():
    perms = _perms(users={"Release-Bot": "maintainer"})
    assert perms.grant("release-bot", "NONE", False).allows("rerun-suite", "1-gpu-h200")


@pytest.mark.parametrize("over, message", [
    ({"version": 2}, "version"),
    ({"roles": {"x": {"commands": ["rm-rf"]}}}, "commands must be a list drawn from"),
    ({"users": {"someone": "admin"}}, "must name roles from"),
    ({"associations": {"OWNERS": "maintainer"}}, "is not one of"),
    ({"max_specs": 0}, "max_specs must be an integer from 1 to 100"),
    ({"roles": {"x": {"commands": [], "runners": ["2-gpu-a100"]}}}, "not in ci/runners.toml"),
])
def test_permission_file_validation(over, message):
    with pytest.raises(UsageError, match=message):
        _perms(**over)


def test_urllib_transport_against_a_local_server(monkeypatch):
    """The real transport: headers, JSON both ways, GitHub's error message on a 4xx."""
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    seen = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _reply(self, code, obj):
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append((self.path, self.headers["Authorization"], self.headers["X-GitHub-Api-Version"], body))
            if self.path.endswith("/labels"):
                self._reply(403, {"message": "Resource not accessible by integration"})
            else:
                self._reply(201, {"id": 77})

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("GITHUB_TOKEN", "t0ken")
        gh = GitHubClient("example/kvbench", api_url=f"http://127.0.0.1:{server.server_port}")
        assert gh.post_comment(3, "hello") == 77
        with pytest.raises(GitHubError, match="403 Resource not accessible by integration"):
            gh.add_labels(3, ["run-ci"])
    finally:
        server.shutdown()
        server.server_close()
    assert seen[0] == ("/repos/example/kvbench/issues/3/comments", "Bearer t0ken", "2022-11-28", {"body": "hello"})
