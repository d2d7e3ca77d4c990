"""kvbench ci reference-triage: a config where SGLang's own loop and the mini engine
differ opens one issue per config and release; a rerun updates it; equal again is noted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.ci import reference_triage as rt
from harness.ci.recording import RecordingClient
from harness.ci.sglang_ref import requirement
from harness.core.errors import UsageError

KVBENCH = Path(sys.executable).parent / "kvbench"
KEY = "spec=dflash,ps=1,bs=16,profile=sglang-0.5.23,workload=uniform,n=12,seed=7"
DIFFERS = {"id": "spec:dflash-ps:1", "key": KEY, "equal": False, "error": None,
           "first_step": {"step": 7, "quantity": "used", "mini": 1856, "sglang": 1858},
           "totals": [{"metric": "tree_pages", "mini": 1960, "sglang": 1969}], "steps": {"mini": 28, "sglang": 29}}
EQUAL = {"id": "spec:none-ps:16", "key": "spec=none,ps=16", "equal": True, "error": None, "first_step": None,
         "totals": [], "steps": {"mini": 20, "sglang": 20}}


def _report(*configs, version="0.5.24") -> dict:
    return {"format": rt.FORMAT, "suite": "smoke", "sglang_version": version, "configs": list(configs),
            "not_run": {}}


def test_a_difference_opens_one_issue_naming_the_step_and_quantity():
    client = RecordingClient()
    log = rt.apply(rt.plan([_report(DIFFERS, EQUAL)], "https://github.example/o/r/actions/runs/1"), client)
    assert len(log) == 1 and log[0].startswith("opened #")
    (issue,) = client.issues.values()
    assert issue["title"] == f"kvbench reference: {KEY} differs on SGLang 0.5.24"
    assert issue["labels"] == [rt.LABEL]
    body = issue["body"]
    assert "**First differing step:** `7`, quantity `used`: mini `1856`, sglang `1858`." in body
    assert "**Steps:** mini `28`, sglang `29`." in body
    assert "| `tree_pages` | `1960` | `1969` |" in body
    assert "`kvbench conform --engine --suite smoke`" in body and "actions/runs/1" in body
    # The next night: the same issue is updated, not a second one opened.
    assert rt.apply(rt.plan([_report(DIFFERS)]), client)[0].startswith("updated #")
    assert len(client.issues) == 1
    # Equal again on that release: one note, once.
    eq = dict(DIFFERS, equal=True, first_step=None, totals=[], steps={"mini": 29, "sglang": 29})
    assert rt.apply(rt.plan([_report(eq)]), client)[0].startswith("noted equal again")
    assert rt.apply(rt.plan([_report(eq)]), client) == []
    # Another release is another issue.
    rt.apply(rt.plan([_report(DIFFERS, version="0.5.25")]), client)
    assert len(client.issues) == 2


def test_report_text_appears_only_in_code_spans():
    hostile = dict(DIFFERS, key="k` | <img src=x> @team", error="boom\n# heading")
    client = RecordingClient()
    rt.apply(rt.plan([_report(hostile)]), client)
    (issue,) = client.issues.values()
    assert "\n# heading" not in issue["body"] and "``k` \\| <img src=x> @team``" in issue["body"]
    assert "\n" not in issue["title"]


@pytest.mark.parametrize("text, says", [
    ("not json", "not JSON"),
    (json.dumps({"format": "other"}), "not a report of kvbench conform"),
    (json.dumps(dict(_report(), configs=[{"key": 1}])), "'configs' must be a list"),
    (json.dumps(dict(_report(), configs=[{"key": "k", "equal": False, "totals": 5}])), "'totals' must be a list"),
])
def test_a_bad_report_is_one_line(tmp_path, text, says):
    path = tmp_path / "r.json"
    path.write_text(text)
    with pytest.raises(UsageError) as err:
        rt.load(path)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_the_report_format_is_the_reference_reports():
    # Copied, not imported (the ci install has no engine): a change on one side would
    # refuse every nightly report.
    from harness.reference.report import FORMAT

    assert rt.FORMAT == FORMAT


def test_cli_dry_run_prints_what_it_would_file(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_report(DIFFERS, EQUAL)))
    out = subprocess.run([KVBENCH, "ci", "reference-triage", str(path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"--- would file: kvbench reference: {KEY} differs on SGLang 0.5.24" in out.stdout
    assert out.stdout.rstrip().endswith("reference-triage: 1 differing, 1 equal over 1 report(s)")
    bad = subprocess.run([KVBENCH, "ci", "reference-triage", str(tmp_path / "none.json")], capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "cannot be read" in bad.stderr


@pytest.mark.parametrize("ref, req", [
    ("", "sglang"),
    ("0.5.24", "sglang==0.5.24"),
    ("0.6.0rc1", "sglang==0.6.0rc1"),
    ("4f1c2e9", "sglang @ git+https://github.com/sgl-project/sglang@4f1c2e9#subdirectory=python"),
    ("release/v0.5", "sglang @ git+https://github.com/sgl-project/sglang@release/v0.5#subdirectory=python"),
])
def test_sglang_requirement(ref, req):
    assert requirement(ref) == req


@pytest.mark.parametrize("ref", ["-e .", "x; rm -rf /", "main..evil", "a b", "https://evil.example/x", "v0.5/"])
def test_a_bad_sglang_ref_is_one_line(ref):
    with pytest.raises(UsageError) as err:
        requirement(ref)
    assert "--ref" in str(err.value) and "\n" not in str(err.value)
