"""An in-memory GitHub with the client's interface: records every call, keeps state.

``--dry-run`` uses it to show what would be done; tests use it to check what was.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.ci.github_client import Client, GitHubClient, GitHubError


@dataclass
class RecordingClient:
    repo: str = "example/kvbench"
    calls: list[tuple] = field(default_factory=list)
    comments: dict[int, str] = field(default_factory=dict)
    issues: dict[int, dict] = field(default_factory=dict)
    labels: dict[int, list[str]] = field(default_factory=dict)
    runs: dict[str, list[dict]] = field(default_factory=dict)  # head sha -> failed runs
    heads: dict[int, str] = field(default_factory=dict)  # pull number -> head sha
    fail_dispatch: bool = False
    _next: int = 1000

    def _id(self) -> int:
        self._next += 1
        return self._next

    def post_comment(self, number: int, body: str) -> int:
        cid = self._id()
        self.comments[cid] = body
        self.calls.append(("post_comment", number, cid))
        return cid

    def get_comment(self, comment_id: int) -> str:
        self.calls.append(("get_comment", comment_id))
        if comment_id not in self.comments:
            raise GitHubError(f"GitHub API GET comment {comment_id} failed: 404 Not Found")
        return self.comments[comment_id]

    def update_comment(self, comment_id: int, body: str) -> None:
        self.calls.append(("update_comment", comment_id))
        if comment_id not in self.comments:
            raise GitHubError(f"GitHub API PATCH comment {comment_id} failed: 404 Not Found")
        self.comments[comment_id] = body

    def add_labels(self, number: int, labels: list[str]) -> None:
        self.calls.append(("add_labels", number, tuple(labels)))
        self.labels.setdefault(number, []).extend(labels)

    def dispatch_workflow(self, workflow: str, ref: str, inputs: dict[str, str]) -> None:
        self.calls.append(("dispatch_workflow", workflow, ref, dict(inputs)))
        if self.fail_dispatch:
            raise GitHubError(f"GitHub API POST dispatch {workflow} failed: 422 Unexpected inputs")

    def pull_head_sha(self, number: int) -> str:
        self.calls.append(("pull_head_sha", number))
        return self.heads.get(number, f"{number:040x}")

    def failed_runs(self, head_sha: str) -> list[dict]:
        self.calls.append(("failed_runs", head_sha))
        return list(self.runs.get(head_sha, []))

    def rerun_failed_jobs(self, run_id: int) -> None:
        self.calls.append(("rerun_failed_jobs", run_id))

    def find_issue(self, title: str, label: str) -> dict | None:
        self.calls.append(("find_issue", title))
        hits = [i for i in self.issues.values() if i["title"] == title and label in i["labels"]]
        hits.sort(key=lambda i: i["state"] != "open")
        return dict(hits[0]) if hits else None

    def open_issue(self, title: str, body: str, labels: list[str]) -> int:
        number = self._id()
        self.issues[number] = {"number": number, "title": title, "body": body,
                               "labels": list(labels), "state": "open", "url": f"#{number}"}
        self.calls.append(("open_issue", number, title))
        return number

    def update_issue(self, number: int, body: str, reopen: bool = False) -> None:
        self.calls.append(("update_issue", number, reopen))
        self.issues[number]["body"] = body
        if reopen:
            self.issues[number]["state"] = "open"

    def count(self, name: str) -> int:
        return sum(1 for c in self.calls if c[0] == name)


def client_for(repo: str | None) -> Client:
    """The client for ``repo``, or, without one, a recording client that only prints."""
    if repo:
        return GitHubClient(repo)
    return RecordingClient()
