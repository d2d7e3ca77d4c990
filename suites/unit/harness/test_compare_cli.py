"""kvbench baseline + compare on real rows: a planted regression fails, a rerun passes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.grid.execute import GridSession
from harness.grid.suites import load_suite
from harness.store.results import RunDir, append_row, load_rows

SUITE = """
name = "cmp"
[defaults]
spec = "dflash"
num_requests = 6
input_len = 64
output_len = 32
pool_tokens = 4096
profile = "floor-free"
[axes]
policy = ["aligned", "unaligned"]
page_size = [16]
[[expect]]
when = { policy = "unaligned" }
status = ["violated", "pool_exhausted"]
violations = { K8 = { min = 1 } }
metrics = { leaked_pages = { min = 1 } }
"""


def sweep_in_process(suite_path: Path, root: Path, run_id: str) -> RunDir:
    run = RunDir(root / "runs" / run_id)
    run.path.mkdir(parents=True)
    run.write_meta({"suite": "cmp", "hardware": {"profile": "cpu"}})
    session = GridSession(load_suite(suite_path), run)
    for gc in session.suite.configs:
        session.run(gc)
    return run


@pytest.fixture
def runs(results_root: Path, tmp_path: Path):
    suite = tmp_path / "cmp.toml"
    suite.write_text(SUITE)
    return sweep_in_process(suite, results_root, "a"), sweep_in_process(suite, results_root, "b")


def test_rerun_passes_and_planted_regressions_fail(runs, results_root, cli, capsys):
    a, b = runs
    assert cli("baseline", "a") == 0
    assert "2 configs, 2 added" in capsys.readouterr().out
    base_file = results_root / "baselines" / "cpu.json"
    assert json.loads(base_file.read_text())["profile"] == "cpu"

    assert cli("compare", "b") == 0  # an unchanged rerun (a second real run)
    assert "0 regressions" in capsys.readouterr().out

    planted = RunDir(results_root / "runs" / "c")
    planted.path.mkdir()
    planted.write_meta(b.meta())
    rows = load_rows(b.path)
    aligned = next(r for r in rows if r["config"]["policy"] == "aligned")
    unaligned = next(r for r in rows if r["config"]["policy"] == "unaligned")
    unaligned["metrics"]["peak_stranded_slots"] += 1  # one more stranded slot
    aligned["violations"]["K5"] = 1  # a violation the baseline never saw
    for r in rows:
        append_row(planted.results, r)
    assert cli("compare", "c", "--format", "markdown") == 1
    out = capsys.readouterr().out
    assert "| `peak_stranded_slots` |" in out and "+1" in out
    assert "| `violations.K5` | 0 | 1 | `new violation" in out
    assert "2 regressions" in out


def test_baseline_of_another_profile_is_exit_2(runs, results_root, cli, capsys):
    other = results_root / "h100.json"
    assert cli("baseline", "a", "--out", other) == 0
    data = json.loads(other.read_text())
    data["profile"] = "h100"
    other.write_text(json.dumps(data))
    capsys.readouterr()
    assert cli("compare", "b", "--baseline", other) == 2
    err = capsys.readouterr().err.strip()
    assert "is for profile 'h100', but the run is on 'cpu'" in err and len(err.splitlines()) == 1
    assert cli("compare", "b", "--baseline", results_root / "missing.json") == 2
    assert cli("compare", "nope") == 2
    # baseline refuses to mix profiles in one file too
    assert cli("baseline", "b", "--out", other) == 2


def test_repeats_give_timing_samples_and_identical_counters(results_root, tmp_path):
    from harness.judge.baseline import build

    suite = tmp_path / "rep.toml"
    suite.write_text(SUITE.replace('[defaults]', 'repeat = 4\n[defaults]'))
    run = sweep_in_process(suite, results_root, "rep")
    rows = load_rows(run.path)
    assert all(r["repeat"] == 4 and "nondeterministic" not in r for r in rows)
    assert {r["verdict"] for r in rows} == {"ok", "as_expected"}
    for r in rows:
        samples = r["samples"]["wall_s"]
        assert len(samples) == 4 and r["metrics"]["wall_s"] == pytest.approx((sorted(samples)[1] + sorted(samples)[2]) / 2)
    base = build(rows, "cpu", "x")[0]
    entry = next(iter(base["configs"].values()))
    assert len(entry["timings"]["wall_s"]["samples"]) == 4 and "steps" in entry["counters"]


def test_baseline_of_a_relative_results_file_reads_its_run(runs, results_root, cli, capsys, monkeypatch):
    # `kvbench baseline results.jsonl` from inside the run: the meta (the commit that
    # made the rows, the profile) is the run's, not that of a nameless '.' directory.
    a, _ = runs
    a.write_meta({**a.meta(), "git_commit": "c0ffee", "hardware": {"profile": "h100"}})
    monkeypatch.chdir(a.path)
    assert cli("baseline", "results.jsonl", "--out", str(results_root / "b.json")) == 0
    base = json.loads((results_root / "b.json").read_text())
    assert (base["git_commit"], base["profile"]) == ("c0ffee", "h100")


@pytest.mark.parametrize("command", ["compare", "baseline"])
def test_a_run_without_rows_is_an_error_not_a_pass(results_root, cli, capsys, command):
    run = RunDir(results_root / "runs" / "empty")
    run.path.mkdir(parents=True)
    run.write_meta({"suite": "cmp", "hardware": {"profile": "cpu"}})
    assert cli(command, "empty") == 2
    assert "has no results" in capsys.readouterr().err
    assert not (results_root / "baselines").exists()


def test_configs_a_filtered_sweep_left_out_are_not_missing(runs, results_root, cli, capsys):
    a, _ = runs
    assert cli("baseline", "a") == 0
    part = RunDir(results_root / "runs" / "part")
    part.path.mkdir()
    for r in load_rows(a.path):
        if r["test_id"] == "policy:aligned":
            append_row(part.results, r)
    part.write_meta({**a.meta(), "filter": "policy:aligned"})
    capsys.readouterr()
    assert cli("compare", "part") == 0
    assert "0 missing" in capsys.readouterr().out
    part.write_meta({**a.meta(), "filter": None})  # unfiltered, the other config is missing: exit 1
    assert cli("compare", "part") == 1
    out = capsys.readouterr().out
    assert "1 missing" in out and "pass --allow-missing" in out
    assert cli("compare", "part", "--allow-missing") == 0


def test_compare_two_arbitrary_runs(runs, results_root, cli, capsys):
    a, b = runs
    assert cli("compare", "a", "b") == 0  # two real runs of the same grid, no baseline blessed
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "kvbench compare b against a (profile cpu)"
    assert "0 regressions" in out and "0 missing" in out
    # B with one more leaked page than A: a regression; A against B: the same change, negative.
    c = RunDir(results_root / "runs" / "c")
    c.path.mkdir()
    c.write_meta(b.meta())
    rows = load_rows(b.path)
    rows[0]["metrics"]["leaked_pages"] += 1
    for r in rows:
        append_row(c.results, r)
    assert cli("compare", "a", "c", "--format", "markdown") == 1
    out = capsys.readouterr().out
    assert "| config | metric | A | B | change | verdict |" in out
    assert f"| `{rows[0]['test_id']}` | `leaked_pages` |" in out and "| `+1`" in out
    assert cli("compare", "c", str(a.path)) == 1  # counters gate exactly, but the label tells the truth
    out = capsys.readouterr().out
    assert "| -1" in out.replace("  -1", "| -1") and "improvement" in out and "1 improvements" in out
    assert "leaked_pages improved -100.0% in 1 config" in out and "only improvements" in out
    # A baseline file as the first argument is the one-run compare spelt out.
    assert cli("baseline", "a") == 0
    assert cli("compare", results_root / "baselines" / "cpu.json", "b") == 0
    capsys.readouterr()
    assert cli("compare", "a", "b", "--baseline", results_root / "baselines" / "cpu.json") == 2
    assert "--baseline goes with one run" in capsys.readouterr().err
    assert cli("compare", "a", "b", "c") == 2


def test_across_hardware_profiles_only_when_asked(runs, results_root, cli, capsys):
    a, b = runs
    b.write_meta({**b.meta(), "hardware": {"profile": "h100"}})
    assert cli("compare", "a", "b") == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("differ in hardware profile cpu vs h100; pass --across-profiles to compare their "
                        "counters (timings are then not comparable)") and len(err.splitlines()) == 1
    assert cli("compare", "a", "b", "--across-profiles", "--all") == 0
    out = capsys.readouterr().out
    timing = [line for line in out.splitlines() if " output_tokens_per_s " in line]
    assert timing and all("not comparable (hardware profile cpu vs h100)" in line for line in timing)
    counters = [line for line in out.splitlines() if " leaked_pages " in line]
    assert counters and all(line.rstrip().endswith(" ok") for line in counters)
    assert "timings not comparable" in out
    # Counters still gate exactly across profiles.
    rows = load_rows(b.path)
    rows[1]["metrics"]["peak_pages_held"] += 3
    b.results.write_text("")
    for r in rows:
        append_row(b.results, r)
    assert cli("compare", "a", "b", "--across-profiles") == 1
    assert "+3" in capsys.readouterr().out


def test_across_accounting_profiles_pairs_configs_without_the_profile(runs, results_root, cli, capsys):
    a, b = runs
    rows = load_rows(b.path)
    b.results.write_text("")
    for r in rows:
        r["config"]["profile"] = "host-aligned"
        r["key"] += ",profile=host-aligned"
        append_row(b.results, r)
    assert cli("compare", "a", "b") == 2
    assert "accounting profile" in capsys.readouterr().err
    assert cli("compare", "b", "a") == 2
    capsys.readouterr()
    assert cli("compare", "a", "b", "--across-profiles") == 0
    out = capsys.readouterr().out
    assert "0 missing" in out and "0 new" in out and "timings not comparable" in out
