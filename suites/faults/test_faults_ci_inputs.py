"""Inputs of the CI commands that must be refused in one line, or survived: link targets
(`ci triage --mlflow-url`, `report --mlflow-url`, $MLFLOW_UI_URL), another profile's
baseline, a 401-digit figure in a night or a rerun's artifact, a damaged saved reply
and nonsense numbers. A refusal is exit 2 and one line naming the option; a damaged
artifact fails the bot's group, whose status is always set."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from faultkit import REPO

NIGHTS = REPO / "suites" / "unit" / "ci" / "fixtures" / "nights"
BASELINE = REPO / "suites" / "unit" / "ci" / "fixtures" / "baseline_cpu.json"
BAD_URLS = ["javascript:alert(1)//", "https://x.example/)[x](https://evil.example", "data:text/html,x",
            "https://mlflow.example/a b", "ftp://mlflow.example"]


def _one_line(capsys, *needles: str) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err and all(n in err for n in needles), err
    return err


def _nights(tmp_path: Path) -> list[Path]:
    shutil.copytree(NIGHTS, tmp_path / "nights")
    return sorted((tmp_path / "nights").iterdir())


def _huge(night: Path) -> None:
    rows = [json.loads(line) for line in (night / "results.jsonl").read_text().splitlines() if line.strip()]
    rows[0]["metrics"]["peak_pages_held"] = 10**400
    (night / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.parametrize("url", BAD_URLS)
def test_triage_takes_only_http_links(url, tmp_path, cli, capsys):
    nights = _nights(tmp_path)
    assert cli("ci", "triage", "--nights", *nights, "--baseline", BASELINE, "--mlflow-url", url) == 2
    _one_line(capsys, "--mlflow-url", "http(s)")


@pytest.mark.parametrize("url", BAD_URLS[:2])
def test_report_takes_only_http_links(url, tmp_path, cli, capsys, monkeypatch):
    nights = _nights(tmp_path)
    assert cli("report", *nights, "--out", tmp_path / "r.html", "--mlflow-url", url) == 2
    _one_line(capsys, "--mlflow-url")
    monkeypatch.setenv("MLFLOW_UI_URL", url)
    assert cli("report", *nights, "--out", tmp_path / "r.html") == 2
    _one_line(capsys, "MLFLOW_UI_URL")
    assert not (tmp_path / "r.html").exists()


def test_triage_refuses_another_profiles_baseline(tmp_path, cli, capsys):
    nights = _nights(tmp_path)
    other = tmp_path / "h100.json"
    other.write_text(json.dumps({**json.loads(BASELINE.read_text()), "profile": "h100"}))
    assert cli("ci", "triage", "--nights", *nights, "--baseline", other) == 2
    _one_line(capsys, "h100", "cpu")
    # --runner names the profile too: the cpu baseline is not the 1-gpu-h100 runner's.
    assert cli("ci", "triage", "--nights", *nights, "--baseline", BASELINE, "--runner", "1-gpu-h100",
               "--root", REPO) == 2
    _one_line(capsys, "cpu", "h100")


def test_a_401_digit_figure_in_a_night_is_one_line(tmp_path, cli, capsys):
    nights = _nights(tmp_path)
    _huge(nights[-1])
    assert cli("ci", "triage", "--nights", *nights, "--baseline", BASELINE) == 2
    _one_line(capsys, "peak_pages_held", "int64")  # the readers' one rule for numbers names it


def _saved_reply(tmp_path: Path, **state) -> Path:
    from harness.ci import reply
    from harness.ci.bot import Group, Plan

    plan = Plan("rerun-suite", user="core-dev", pr=3, groups=[Group("cpu", suite="smoke"), Group("cpu", suite="smoke")])
    body = reply.render(plan)
    for old, new in state.items():
        body = body.replace(old, new, 1)
    path = tmp_path / "reply.md"
    path.write_text(body)
    return path


def _report(cli, body: Path, *extra) -> int:
    return cli("bot", "report", "--dry-run", "--body-file", body, "--comment-id", 1, "--group", 1,
               "--result", "success", "--root", REPO, *extra)


def test_a_401_digit_figure_in_an_artifact_fails_the_group(tmp_path, cli, capsys):
    from harness.ci import reply

    night = _nights(tmp_path)[-1]
    _huge(night)
    assert _report(cli, _saved_reply(tmp_path), "--results", night, "--baseline", BASELINE) == 0
    group = reply.parse(capsys.readouterr().out).groups[0]
    assert group.status == "failed" and "artifact unreadable" in group.table


def test_an_unknown_status_of_another_group_does_not_stop_the_update(tmp_path, cli, capsys):
    from harness.ci import reply

    # Group 2's saved status is one this version does not know (an edited or newer reply).
    body = _saved_reply(tmp_path)
    text = body.read_text()
    at = text.index('"status":"queued"', text.index('"status":"queued"') + 1)
    body.write_text(text[:at] + '"status":"paused"' + text[at + len('"status":"queued"'):])
    assert _report(cli, body) == 0
    groups = reply.parse(capsys.readouterr().out).groups
    assert [g.status for g in groups] == ["passed", "error"]


def test_a_binary_body_file_is_one_line(tmp_path, cli, capsys):
    body = tmp_path / "reply.md"
    body.write_bytes(b"\xff\xfe\x00binary")
    assert _report(cli, body) == 2
    _one_line(capsys, "--body-file", "reply.md': not UTF-8 text")


@pytest.mark.parametrize("pr", ["0", "-1"])
def test_bot_plan_needs_a_pull_request_number(pr, cli, capsys):
    assert cli("bot", "plan", "/rerun-test test_x.py", "--pr", pr, "--root", REPO) == 2
    _one_line(capsys, "--pr", ">= 1")


def test_rerun_args_refuses_a_filter_with_tests(cli, capsys):
    assert cli("ci", "rerun-args", "--runner", "cpu", "--run-id", "r1", "--root", REPO,
               "--tests", json.dumps(["suites/unit/ci/test_ci_bot.py"]), "--filter", "ps:16") == 2
    _one_line(capsys, "--filter", "--suite")


def test_a_runner_label_with_a_newline_is_one_line(tmp_path, cli, capsys):
    root = tmp_path / "repo"
    shutil.copytree(REPO / "ci", root / "ci")
    with (root / "ci" / "runners.toml").open("a") as fh:
        fh.write('\n[runners."gpu\\n## merged"]\nprofile = "cpu"\ngpus = 0\nruns_on = "x"\n')
    assert cli("ci", "runners", "--root", root) == 2
    _one_line(capsys, "runners.'gpu\\n## merged'")
    assert cli("ci", "rerun-args", "--runner", "cpu\n## x", "--run-id", "r1", "--suite", "smoke", "--root", REPO) == 2
    _one_line(capsys, "runner must be one of")
