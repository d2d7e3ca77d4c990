"""The only module that knows GitHub: a small REST client over urllib.

Everything the bot and triage need is one method here; tests and ``--dry-run`` use
``harness.ci.recording.RecordingClient``, which has the same methods and no network.
The token comes from the environment, never from a command line.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from typing import Callable, Protocol

from harness.core.errors import HarnessError

REPO_RE = re.compile(r"[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}\Z", re.ASCII)
WORKFLOW_RE = re.compile(r"[A-Za-z0-9_.-]{1,100}\.ya?ml\Z", re.ASCII)
API_URL = "https://api.github.com"
MAX_PAGES = 10

Send = Callable[[str, str, "dict | None"], "tuple[int, object]"]


class GitHubError(HarnessError):
    """A GitHub API call failed (one line: the call and GitHub's message)."""


class Client(Protocol):
    """What the bot and triage may ask of GitHub."""

    def post_comment(self, number: int, body: str) -> int: ...
    def get_comment(self, comment_id: int) -> str: ...
    def update_comment(self, comment_id: int, body: str) -> None: ...
    def add_labels(self, number: int, labels: list[str]) -> None: ...
    def dispatch_workflow(self, workflow: str, ref: str, inputs: dict[str, str]) -> None: ...
    def pull_head_sha(self, number: int) -> str: ...
    def failed_runs(self, head_sha: str) -> list[dict]: ...
    def rerun_failed_jobs(self, run_id: int) -> None: ...
    def find_issue(self, title: str, label: str) -> dict | None: ...
    def open_issue(self, title: str, body: str, labels: list[str]) -> int: ...
    def update_issue(self, number: int, body: str, reopen: bool = False) -> None: ...


def check_repo(repo: str) -> str:
    if not REPO_RE.match(repo or "") or ".." in repo:
        raise HarnessError(f"--github must be OWNER/NAME of a repository (got {repo!r})")
    return repo


def _urllib_send(token: str, api_url: str) -> Send:
    def send(method: str, path: str, payload: dict | None) -> tuple[int, object]:
        data = None if payload is None else json.dumps(payload).encode()
        req = urllib.request.Request(api_url + path, data=data, method=method)
        req.add_header("Accept", "application/vnd.github+json")
        req.add_header("X-GitHub-Api-Version", "2022-11-28")
        req.add_header("Authorization", f"Bearer {token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                raw = resp.read()
                return resp.status, (json.loads(raw) if raw else None)
        except urllib.error.HTTPError as err:
            try:
                message = json.loads(err.read() or b"{}").get("message", "")
            except (ValueError, AttributeError):
                message = ""
            return err.code, {"message": message or err.reason}
        except (urllib.error.URLError, TimeoutError) as err:
            raise GitHubError(f"GitHub API {method} {path} failed: {err}") from None

    return send


class GitHubClient:
    """REST client for one repository. ``send`` is injectable so tests can record calls."""

    def __init__(self, repo: str, token: str | None = None, send: Send | None = None, api_url: str = API_URL):
        self.repo = check_repo(repo)
        if send is None:
            token = token or os.environ.get("GITHUB_TOKEN", "")
            if not token:
                raise HarnessError("GITHUB_TOKEN is not set (needed with --github; --dry-run prints instead)")
            send = _urllib_send(token, api_url.rstrip("/"))
        self._send = send

    def _call(self, method: str, path: str, payload: dict | None = None, ok=(200, 201, 204)) -> object:
        full = f"/repos/{self.repo}{path}"
        status, data = self._send(method, full, payload)
        if status not in ok:
            message = data.get("message", "") if isinstance(data, dict) else ""
            raise GitHubError(f"GitHub API {method} {full} failed: {status} {message}".rstrip())
        return data

    def post_comment(self, number: int, body: str) -> int:
        return int(self._call("POST", f"/issues/{int(number)}/comments", {"body": body})["id"])

    def get_comment(self, comment_id: int) -> str:
        return str(self._call("GET", f"/issues/comments/{int(comment_id)}")["body"] or "")

    def update_comment(self, comment_id: int, body: str) -> None:
        self._call("PATCH", f"/issues/comments/{int(comment_id)}", {"body": body})

    def add_labels(self, number: int, labels: list[str]) -> None:
        self._call("POST", f"/issues/{int(number)}/labels", {"labels": list(labels)})

    def dispatch_workflow(self, workflow: str, ref: str, inputs: dict[str, str]) -> None:
        if not WORKFLOW_RE.match(workflow):
            raise GitHubError(f"workflow must be a file name like rerun-test.yml (got {workflow!r})")
        self._call("POST", f"/actions/workflows/{workflow}/dispatches", {"ref": ref, "inputs": inputs})

    def pull_head_sha(self, number: int) -> str:
        return str(self._call("GET", f"/pulls/{int(number)}")["head"]["sha"])

    def failed_runs(self, head_sha: str) -> list[dict]:
        query = urllib.parse.urlencode({"head_sha": head_sha, "status": "failure", "per_page": 100})
        data = self._call("GET", f"/actions/runs?{query}")
        return [
            {"id": int(r["id"]), "name": str(r.get("name", "")), "url": str(r.get("html_url", ""))}
            for r in data.get("workflow_runs", [])
        ]

    def rerun_failed_jobs(self, run_id: int) -> None:
        self._call("POST", f"/actions/runs/{int(run_id)}/rerun-failed-jobs")

    def find_issue(self, title: str, label: str) -> dict | None:
        """The tracking issue with exactly this title (open ones first), or None."""
        closed = None
        for page in range(1, MAX_PAGES + 1):
            query = urllib.parse.urlencode(
                {"state": "all", "labels": label, "per_page": 100, "page": page, "sort": "updated"}
            )
            items = self._call("GET", f"/issues?{query}")
            for item in items:
                if item.get("title") == title and "pull_request" not in item:
                    found = {"number": int(item["number"]), "body": item.get("body") or "",
                             "state": item.get("state", "open"), "url": item.get("html_url", "")}
                    if found["state"] == "open":
                        return found
                    closed = closed or found
            if len(items) < 100:
                break
        return closed

    def open_issue(self, title: str, body: str, labels: list[str]) -> int:
        data = self._call("POST", "/issues", {"title": title, "body": body, "labels": list(labels)})
        return int(data["number"])

    def update_issue(self, number: int, body: str, reopen: bool = False) -> None:
        payload = {"body": body}
        if reopen:
            payload["state"] = "open"
        self._call("PATCH", f"/issues/{int(number)}", payload)
