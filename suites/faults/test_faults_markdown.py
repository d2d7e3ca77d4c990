"""Hostile text in every Markdown kvbench writes for GitHub: the step summary (`report
--summary`), `compare --format markdown`, `history --format markdown`, the bot's compare
table and triage issues. Test ids, statuses and commits of a run are text a pull
request (or a damaged night) shapes; parsed as GitHub parses it, the output must render
no link, image, heading, HTML, autolink or mention, and no table row may gain a cell."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from faultkit import REPO
from harness.core.markdown import code, one_line, prose
from harness.judge.compare import CompareReport, Finding
from mdcheck import cells_per_row, live

NIGHTS = REPO / "suites" / "unit" / "ci" / "fixtures" / "nights"
BASELINE = REPO / "suites" / "unit" / "ci" / "fixtures" / "baseline_cpu.json"
HOSTILE = [
    "x\n\n## All good, merge\n![t](https://evil.example/t.png) @org/team",
    "<img src=x> <details> [click](https://evil.example) @everyone <script>alert(1)</script>",
    "https://evil.example/login",
    "www.evil.example/x",
    "a`b``c ```` | d \\| e \\\\| f",
    "> quote\n- item\n1. one\n---\nuser@example.com &amp; \u202eevil",
]
# What a name in a results artifact may be (harness.store.artifact.NAME_RE): what the bot's table shows.
ARTIFACT_SAFE = ["https://evil.example/login", "www.evil.example/x", "a:b/c=d,e+f"]
TEXT = st.text(alphabet=st.sampled_from(list("ab@#!<>[]()`*_|\\\n -/:.w&;~=\u202e\u200b\xa0")), max_size=80) | st.text(
    max_size=80)
MLFLOW = tuple(f"https://mlflow.example/#/runs/{p * 16}" for p in ("1f", "2e", "3d"))


def _span_text(md: str) -> str:
    """The text of the one code span ``md`` parses to (fails if it parses to anything else)."""
    from mdcheck import MD

    (para, inline, close) = MD.parse(md)
    assert [c.type for c in inline.children] == ["code_inline"], md
    return inline.children[0].content


@settings(max_examples=300, deadline=None)
@given(TEXT)
def test_code_is_one_inert_span_holding_the_text(text):
    md, want = code(text), one_line(text, 200)
    # The span survives backticks, '|', backslashes and line breaks, and holds the text itself
    # (an empty text is a span of spaces).
    got = _span_text(md).replace("\\|", "|").replace("\u200b", "")
    assert got == want if want else not got.strip()
    table = f"| h |\n|---|\n| {md} |\n"
    assert cells_per_row(table) == [2, 2, 2] and not live(table)


@settings(max_examples=300, deadline=None)
@given(TEXT, TEXT)
def test_prose_around_code_spans_is_inert(ours, theirs):
    for md in (prose(ours), prose(f"{ours} {code(theirs)} {ours}"), prose(f"{theirs} @me", keep_mention="me")):
        assert not live(md, mention="me"), md
        assert "\n" not in md


@settings(max_examples=100, deadline=None)
@given(TEXT, TEXT, TEXT)
def test_a_compare_table_keeps_its_cells(name, metric, status):
    report = CompareReport([Finding("k1", metric, 1, 2, "+1", "regression"),
                            Finding("k2", "status", None, None, f"ok -> {status}", "regression"),
                            Finding("k3", metric, status, None, "?", "missing")], names={"k1": name})
    md = report.table("markdown")
    assert not live(md), md
    assert len(set(cells_per_row(md))) == 1, md


# The run links open MLflow's model-training view in the run's experiment (store/links.py).
VIEWS = tuple(link.replace("/#/runs/", "/#/experiments/7/runs/") + "?workflowType=machine_learning" for link in MLFLOW)


def _nights(tmp_path: Path, text: str, status: bool = True) -> list[Path]:
    """The three recorded nights with ``text`` in every test id, a status and a commit."""
    out = []
    for i, src in enumerate(sorted(NIGHTS.iterdir())):
        night = tmp_path / "nights" / src.name
        shutil.copytree(src, night)
        rows = [json.loads(line) for line in (night / "results.jsonl").read_text().splitlines() if line.strip()]
        for j, row in enumerate(rows):
            row["test_id"] = f"{text}-{j}"
        if i == 2 and status:
            rows[-1]["status"] = text
        (night / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        meta = json.loads((night / "meta.json").read_text())
        meta["git_commit"] = text if i == 1 else meta["git_commit"]
        meta["mlflow_experiment"] = "7"
        (night / "meta.json").write_text(json.dumps(meta))
        out.append(night)
    return out


@pytest.mark.parametrize("text", HOSTILE)
def test_summary_compare_and_history_render_nothing_live(text, tmp_path, cli, capsys):
    nights = _nights(tmp_path, text)
    summary = tmp_path / "summary.md"
    assert cli("report", *nights, "--out", tmp_path / "r.html", "--summary", summary,
               "--mlflow-url", "https://mlflow.example") == 0
    capsys.readouterr()
    md = summary.read_text()
    assert not live(md, links=VIEWS, headings=("kvbench report",)), md
    # The third night's status is the text: compare refuses it in one line (harness/core/figures.py)
    assert cli("compare", nights[0], nights[2], "--format", "markdown") == 2
    assert cli("compare", nights[0], nights[1], "--format", "markdown") in (0, 1)
    assert cli("history", "smoke", "--nights", tmp_path / "nights", "--all", "--format", "markdown") == 0
    out = capsys.readouterr().out
    assert not live(out, headings=("kvbench history",)), out
    for md in (summary.read_text(), out):
        for table in md.split("\n\n"):
            assert len(set(cells_per_row(table))) <= 1, table


@pytest.mark.parametrize("text", HOSTILE)
def test_triage_bodies_render_nothing_live(text, tmp_path, cli, capsys):
    nights = _nights(tmp_path, text)
    assert cli("ci", "triage", "--nights", *nights, "--baseline", BASELINE, "--root", REPO,
               "--mlflow-url", "https://mlflow.example") == 0
    out = capsys.readouterr().out
    bodies = out.split("\n--- would file: ")[1:]
    assert bodies, out
    for body in bodies:
        md = body.split("\n", 1)[1].rsplit("\ntriage:", 1)[0]
        assert not live(md, links=VIEWS, html=("<!-- kvbench-triage -->",)), md
        assert len(set(cells_per_row(md))) == 1, md


@pytest.mark.parametrize("text", ARTIFACT_SAFE)
def test_the_bot_compare_table_autolinks_nothing(text, tmp_path, cli, capsys):
    from harness.ci import reply
    from harness.ci.bot import Group, Plan

    night = _nights(tmp_path, text, status=False)[2]
    body = tmp_path / "reply.md"
    body.write_text(reply.render(Plan("rerun-suite", user="core-dev", pr=3, groups=[Group("cpu", suite="smoke")])))
    assert cli("bot", "report", "--dry-run", "--body-file", body, "--comment-id", 1, "--group", 1,
               "--result", "success", "--results", night, "--baseline", BASELINE, "--root", REPO) == 0
    out = capsys.readouterr().out
    assert text in out  # the names are in the table, as code spans
    assert not live(out, mention="core-dev", html=("<!-- kvbench-bot {",)), out
