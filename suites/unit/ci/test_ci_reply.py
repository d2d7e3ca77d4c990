"""The reply comment as shared state: long random sequences of status reports, some of
them racing (read, someone else writes, write), must end with every group's last
status shown exactly once and the hidden state intact."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from harness.ci import reply
from harness.ci.bot import Group, Plan
from harness.ci.handle import report
from harness.ci.recording import RecordingClient

RUNNERS = ["cpu", "1-gpu-5090", "1-gpu-h100", "1-gpu-h200", "8-gpu-h200"]
STATUSES = ["queued", "running", "passed", "failed", "cancelled", "error"]


class RacingClient(RecordingClient):
    """After the next write, a second reporter's stale write lands (it read before)."""

    def __init__(self):
        super().__init__()
        self.pending: list[str] = []

    def update_comment(self, comment_id: int, body: str) -> None:
        super().update_comment(comment_id, body)
        while self.pending:
            stale = self.pending.pop()
            super().update_comment(comment_id, stale)


def _plan(n: int) -> Plan:
    groups = [Group(RUNNERS[i % len(RUNNERS)], tests=[f"suites/unit/test_{i}.py"]) for i in range(n)]
    return Plan("rerun-test", user="core-dev", pr=7, groups=groups)


class ReplyMachine(RuleBasedStateMachine):
    @initialize(n=st.integers(1, 6))
    def start(self, n):
        self.client = RacingClient()
        self.cid = self.client.post_comment(7, reply.render(_plan(n)))
        self.model = ["queued"] * n
        self.urls = [""] * n

    @rule(data=st.data(), status=st.sampled_from(STATUSES), run=st.integers(1, 10**6))
    def report_one(self, data, status, run):
        g = data.draw(st.integers(1, len(self.model)))
        url = f"https://github.com/example/kvbench/actions/runs/{run}"
        report(self.client, self.cid, g, status, url)
        self.model[g - 1], self.urls[g - 1] = status, url

    @rule(data=st.data(), s1=st.sampled_from(STATUSES), s2=st.sampled_from(STATUSES))
    def racing_reports(self, data, s1, s2):
        """B reads, A reads and writes, B's write (from its stale read) lands after A's."""
        n = len(self.model)
        a, b = data.draw(st.integers(1, n)), data.draw(st.integers(1, n))
        if a == b:
            return
        stale_b = reply.update(self.client.comments[self.cid], b, s2)
        self.client.pending.append(stale_b)
        report(self.client, self.cid, a, s1)  # must notice B undid its change, and redo it
        self.model[a - 1], self.model[b - 1] = s1, s2

    @invariant()
    def reply_shows_the_model(self):
        body = self.client.comments[self.cid]
        groups = reply.parse(body).groups
        assert [g.status for g in groups] == self.model
        for i, g in enumerate(groups, 1):
            assert body.count(f"**{i}. runner `{g.runner}`**") == 1
            assert reply.MARKERS[g.status] in body
            if self.urls[i - 1]:
                assert g.run_url == self.urls[i - 1]


ReplyMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
TestReplyMachine = ReplyMachine.TestCase


def test_update_rejects_bad_input():
    body = reply.render(_plan(2))
    with pytest.raises(reply.ReplyError, match="group must be in 1..2"):
        reply.update(body, 3, "passed")
    with pytest.raises(reply.ReplyError, match="status must be one of"):
        reply.update(body, 1, "exploded")
    with pytest.raises(reply.ReplyError, match="http"):
        reply.update(body, 1, "passed", run_url="javascript:alert(1)")
    with pytest.raises(reply.ReplyError, match="not a kvbench bot reply"):
        reply.update("LGTM", 1, "passed")
    with pytest.raises(reply.ReplyError, match="damaged"):
        reply.update(body.replace('"groups":[', '"groups":[7,'), 1, "passed")


def test_state_cannot_be_closed_by_a_table():
    body = reply.render(_plan(1))
    table = "| config | metric |\n|---|---|\n| a-->b <!-- x --> | & |"
    updated = reply.update(body, 1, "failed", table=table)
    state_end = reply.STATE_RE.search(updated).end()
    assert updated.index("-->") == state_end - 3  # the first '-->' is the state's own end
    assert "<!--" not in updated[state_end:]  # the table opens no HTML comment in the body
    assert reply.parse(updated).groups[0].table == table


def test_repeated_updates_keep_notes_once():
    """A table line in italics (a truncation or no-baseline notice) is not a plan note:
    the reply must not grow a copy of it on every status update."""
    plan = Plan("rerun-suite", user="core-dev", pr=42, groups=[Group("cpu", suite="smoke")],
                notes=["only the first line of a comment is read"])
    body = reply.render(plan)
    table = "| a |\n|---|\n| 1 |\n\n_(table truncated; see the run's artifact)_"
    body = reply.update(body, 1, "passed", table=table)
    for status in ("failed", "failed", "passed"):
        body = reply.update(body, 1, status)
    assert body.count("table truncated") == 2  # the table itself, and its copy in the hidden state
    assert body.count("_only the first line of a comment is read_") == 1
    assert reply.parse(body).notes == ["only the first line of a comment is read"]
