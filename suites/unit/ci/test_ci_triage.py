"""Nightly triage on recorded nights (fixtures/nights, compared with fixtures/baseline_cpu.json).

The recorded nights, oldest first, with the commit each measured:
  25 (a5a5...): config C's syncs regress            (fixed the next night)
  26 (b6b6...): config A's peak_pages_held regresses
  27 (c7c7...): config A still regressed; config B's leaked_pages regresses (first time)
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.ci import triage
from harness.ci.recording import RecordingClient
from harness.core.errors import UsageError
from harness.judge.baseline import load_baseline

FIX = Path(__file__).resolve().parent / "fixtures"
NIGHTS = FIX / "nights"
N25, N26, N27 = (NIGHTS / f"nightly-202611{d}" for d in (25, 26, 27))
KVBENCH = Path(sys.executable).parent / "kvbench"


@pytest.fixture(scope="module")
def baseline():
    return load_baseline(FIX / "baseline_cpu.json", expected_profile="cpu")


REPO_URL = "https://github.example/org/kvbench"
GOOD, BAD = "a5" * 20, "b6" * 20


def _run(dirs, baseline, client, where="cpu"):
    nights = triage.load_nights(list(dirs), baseline, "https://mlflow.example")
    tp = triage.plan(nights, baseline, where, repo_url=REPO_URL)
    return tp, triage.apply(tp, client, where, nights[-1].name)


def test_two_nights_in_a_row_open_one_issue_per_config(baseline):
    client = RecordingClient()
    tp, log = _run([N25, N26, N27], baseline, client)
    assert [(t.metrics, t.streak) for t in tp.track] == [(["peak_pages_held"], 2)]
    assert client.count("open_issue") == 1
    issue = next(iter(client.issues.values()))
    assert issue["title"].startswith("kvbench regression: spec=dflash,ps=16,bs=16,policy=aligned")
    assert issue["title"].endswith("(cpu)") and issue["labels"] == [triage.LABEL]
    body = issue["body"]
    assert "regressed on 2 consecutive nights, since `nightly-20261126`: 1 metric(s) moved" in body
    # The range: the last good night (25) and the first bad one (26), linked.
    assert (f"last good night `nightly-20261125` at [`{GOOD[:12]}`]({REPO_URL}/commit/{GOOD}), first bad night "
            f"`nightly-20261126` at [`{BAD[:12]}`]({REPO_URL}/commit/{BAD})") in body
    assert f"({REPO_URL}/compare/{GOOD}...{BAD})" in body
    assert f"`kvbench bisect --good {GOOD} --bad {BAD} --config " in body
    assert ("| `peak_pages_held` | 118 | 118 | 119 **(regressed)** | 120 **(regressed)** | `+2 (+1.7%)` | 2 |"
            in body)
    assert "[`nightly-20261127`](https://mlflow.example/#/runs/" + "3d" * 16 + ")" in body
    assert tp.track[0].good == GOOD and tp.track[0].bad == BAD
    # B regressed on the newest night only: logged, not filed.
    assert [m for _, m in tp.blips] == [["leaked_pages"]]
    assert any(line.startswith("one night only") for line in log)


def test_all_moved_metrics_of_a_config_share_its_issue(baseline, tmp_path):
    """A second metric of config A moves on the newest night: a second row, not a second issue."""
    night = tmp_path / "nightly-20261128"
    shutil.copytree(N27, night)
    rows = [json.loads(line) for line in (night / "results.jsonl").read_text().splitlines()]
    key = triage.load_nights([N27], baseline)[0].report.regressions[0].key
    for row in rows:
        if row["key"] == key:
            row["metrics"]["peak_reserved_slots"] = row["metrics"].get("peak_reserved_slots", 0) + 5
    (night / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    client = RecordingClient()
    tp, _ = _run([N25, N26, N27, night], baseline, client)
    (a,) = [t for t in tp.track if t.key == key]  # B (leaked pages, nights 27 and 28) has its own
    assert (sorted(a.metrics), a.streak) == (["peak_pages_held", "peak_reserved_slots"], 3)
    assert client.count("open_issue") == 2
    issue = next(i for i in client.issues.values() if i["title"] == a.title)
    assert "| `peak_reserved_slots` |" in issue["body"] and "| `peak_pages_held` |" in issue["body"]
    assert "2 metric(s) moved" in issue["body"]


def test_no_last_good_night_in_the_window(baseline):
    client = RecordingClient()
    tp, _ = _run([N26, N27], baseline, client)
    body = next(iter(client.issues.values()))["body"]
    assert "the last good night is older than the nights triaged" in body and "kvbench bisect" not in body
    assert tp.track[0].good == "" and tp.track[0].bad == BAD


def test_untrusted_text_stays_inside_code_spans(baseline, tmp_path):
    """A config key, night name or metric a pull request shaped cannot close its code
    span, open a link, ping someone or break the table."""
    hostile = "x` [click](https://evil.example) @org/team | <img src=x>\n# Title\u202e"
    assert triage.code(hostile) == "``x` [click](https://evil.example) @org/team \\| <img src=x> # Title``"
    assert triage.code("`") == "`` ` ``" and triage.code("") == "`  `"
    assert "\n" not in triage.title_for(hostile, "cpu")
    base = {"profile": "cpu", "created": "", "git_commit": "0" * 40,
            "configs": {hostile: {"counters": {"leaked_pages": 0}, "timings": {}, "status": "ok", "test_id": hostile}}}
    dirs = []
    for i in range(2):
        d = tmp_path / f"n{i}`<b>"
        d.mkdir()
        (d / "results.jsonl").write_text(json.dumps({"key": hostile, "status": "ok", "test_id": hostile,
                                                     "metrics": {"leaked_pages": 1}, "violations": {}}) + "\n")
        (d / "meta.json").write_text(json.dumps({"git_commit": "`; rm -rf ~ `"}))
        dirs.append(d)
    client = RecordingClient()
    tp, _ = _run(dirs, base, client)
    body = next(iter(client.issues.values()))["body"]
    # Rendered as GitHub would (CommonMark with tables, raw HTML allowed): no link, image,
    # heading or mention came out of the hostile text, and every table row kept its cells.
    from markdown_it import MarkdownIt

    html = MarkdownIt("commonmark", {"html": True}).enable("table").render(body)
    assert "evil.example" in html and "<a href" not in html.replace('<a href="https://mlflow.example', "")
    assert "<img" not in html and "<h1>" not in html and "<b>" not in html
    assert all(row.count("<td>") == 6 for row in html.split("<tr>")[2:])  # metric, baseline, 2 nights, change, streak
    assert "/commit/`" not in body and "/compare/" not in body  # a commit that is not a sha is not linked


def test_one_night_blip_opens_nothing(baseline):
    client = RecordingClient()
    tp, _ = _run([N25, N26], baseline, client)  # A only on the newest of these; C fixed
    assert tp.track == [] and client.count("open_issue") == 0
    tp, _ = _run([N27], baseline, client)  # a single night never files
    assert tp.track == [] and client.count("open_issue") == 0


def test_regressions_must_be_on_consecutive_nights(baseline):
    client = RecordingClient()
    tp, _ = _run([N26, N25, N27], baseline, client)  # A regressed on 26 and 27, but 25 is between
    assert tp.track == [] and client.count("open_issue") == 0


def test_next_night_updates_the_same_issue_and_reopens_a_closed_one(baseline):
    client = RecordingClient()
    _run([N26, N27], baseline, client)
    _run([N26, N27], baseline, client)
    assert client.count("open_issue") == 1 and client.count("update_issue") == 1
    (number, issue), = client.issues.items()
    issue["state"] = "closed"
    _, log = _run([N26, N27], baseline, client)
    assert client.count("open_issue") == 1 and issue["state"] == "open"
    assert log[0].startswith(f"reopened #{number}")


def test_recovery_is_noted_on_the_open_issue(baseline):
    client = RecordingClient()
    key = next(iter(triage.load_nights([N25], baseline)[0].report.regressions)).key
    title = triage.title_for(key, "cpu")
    number = client.open_issue(title, "tracking", [triage.LABEL])
    tp, log = _run([N25, N26], baseline, client)
    assert tp.recovered == [key]
    assert "Not regressed on `nightly-20261126`" in client.issues[number]["body"]
    assert log[0] == f"noted recovery on #{number}: {title}"


def test_long_keys_keep_titles_short_and_distinct():
    a = triage.title_for("k=" + "x" * 400, "h200")
    b = triage.title_for("k=" + "x" * 399 + "y", "h200")
    assert len(a) < 256 and a != b


def test_history_and_bad_input(baseline, tmp_path):
    assert triage.history(NIGHTS) == [N25, N26, N27]
    with pytest.raises(UsageError, match="has no results.jsonl"):
        triage.load_nights([tmp_path], baseline)
    with pytest.raises(UsageError, match="--min-nights must be an integer >= 2"):
        triage.plan(triage.load_nights([N27], baseline), baseline, "cpu", min_nights=1)


def test_cli_dry_run():
    out = subprocess.run([KVBENCH, "ci", "triage", "--history", NIGHTS, "--baseline", FIX / "baseline_cpu.json",
                          "--runner", "cpu"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "opened #" in out.stdout and "triage: 1 tracked, 1 one-night, 0 recovered, 0 improved, 0 changed over 3 night(s)" in out.stdout
    out = subprocess.run([KVBENCH, "ci", "triage", "--nights", NIGHTS, "--baseline", FIX / "baseline_cpu.json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "has no results.jsonl" in out.stderr and "Traceback" not in out.stderr
    out = subprocess.run([KVBENCH, "ci", "triage", "--history", NIGHTS, "--baseline", FIX / "nope.json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "not found" in out.stderr


KEYS = ["spec=dflash,ps=16", "spec=eagle,ps=64", "spec=none,ps=1"]


def _synthetic_baseline() -> dict:
    return {"profile": "cpu", "created": "2026-11-01T00:00:00Z", "git_commit": "0" * 40,
            "configs": {k: {"counters": {"leaked_pages": 0}, "timings": {}, "status": "ok", "test_id": None}
                        for k in KEYS}}


@settings(max_examples=30, deadline=None)
@given(nights=st.lists(st.lists(st.booleans(), min_size=len(KEYS), max_size=len(KEYS)), min_size=1, max_size=9))
def test_issues_follow_streaks_night_after_night(nights):
    """Run triage every night over the last seven, as the workflow does. An issue exists
    for a config exactly when it once regressed two nights running, and never twice."""
    baseline = _synthetic_baseline()
    client = RecordingClient()
    streak = dict.fromkeys(KEYS, 0)
    ever = set()
    with tempfile.TemporaryDirectory() as tmp:
        dirs = []
        for t, regressed in enumerate(nights):
            d = Path(tmp) / f"night-{t:03d}"
            d.mkdir()
            rows = [{"key": k, "status": "ok", "metrics": {"leaked_pages": int(r)}, "violations": {}}
                    for k, r in zip(KEYS, regressed)]
            (d / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            dirs.append(d)
            _run(dirs[-7:], baseline, client)
            for k, r in zip(KEYS, regressed):
                streak[k] = streak[k] + 1 if r else 0
                if streak[k] >= 2:
                    ever.add(k)
            titles = [i["title"] for i in client.issues.values()]
            assert len(titles) == len(set(titles)) == len(ever)
            assert set(titles) == {triage.title_for(k, "cpu") for k in ever}


def test_a_config_missing_from_the_newest_night_has_not_recovered(baseline, tmp_path):
    """A night whose sweep stopped before config A has no figure for A: that is not a
    recovery, and the tracking issue must not be told it recovered."""
    key = triage.load_nights([N27], baseline)[0].report.regressions[0].key
    partial = tmp_path / "nightly-20261128"
    partial.mkdir()
    rows = [line for line in (N27 / "results.jsonl").read_text().splitlines() if json.loads(line)["key"] != key]
    (partial / "results.jsonl").write_text("\n".join(rows) + "\n")
    client = RecordingClient()
    _run([N26, N27], baseline, client)
    (number, issue), = client.issues.items()
    tp, log = _run([N26, N27, partial], baseline, client)
    assert key not in tp.recovered
    assert "Not regressed" not in issue["body"]
    # Nor when the config ran but that figure is missing from its row.
    rows = [json.loads(line) for line in (N27 / "results.jsonl").read_text().splitlines()]
    for row in rows:
        if row["key"] == key:
            del row["metrics"]["peak_pages_held"]
    (partial / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    tp, log = _run([N26, N27, partial], baseline, client)
    assert key not in tp.recovered
    assert "Not regressed" not in issue["body"]


def test_an_improvement_opens_no_regression_issue(baseline, tmp_path):
    """Fewer leaked pages two nights in a row is an improvement: triage says so, as compare
    does, and files nothing; a regressed night's cell in an issue says "regressed"."""
    key = triage.load_nights([N27], baseline)[0].report.regressions[0].key
    base = next(f.baseline for f in triage.load_nights([N25], baseline)[0].report.findings
                if f.key == key and f.metric == "leaked_pages")
    nights = []
    for name in ("nightly-20261128", "nightly-20261129"):
        night = tmp_path / name
        shutil.copytree(N25, night)
        rows = [json.loads(line) for line in (night / "results.jsonl").read_text().splitlines()]
        for row in rows:
            if row["key"] == key:
                row["metrics"]["leaked_pages"] = base - 1 if base else -1
        (night / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        nights.append(night)
    client = RecordingClient()
    tp, log = _run(nights, baseline, client)
    assert ("improved", "leaked_pages", key) in tp.moved
    # Night 25's config C (syncs) regresses in both copies and is filed; config A is not.
    assert all(t.key != key for t in tp.track)
    assert all(key not in i["title"] for i in client.issues.values())
    assert f"improved, no issue: leaked_pages on {key}" in log
    assert not any(key in line and "regress" in line for line in log)
    client = RecordingClient()
    _run([N25, N26, N27], baseline, client)
    body = next(iter(client.issues.values()))["body"]
    assert "**(regressed)**" in body and "**(improved)**" not in body
