"""A gate that cannot judge fails, saying why; damaged figures are refused where they
are read, never judged or blessed (R2, R3, R6, R12).

- ``sweep --fail-on-regression`` (the nightly's gate) exits 2 when a reference it has
  cannot be read (a baseline that is not JSON or holds NaN, a damaged earlier night) or
  when it has none; 1 stays a regression (docs/harness.md);
- rows whose metrics are ``{}``, a counter negative or a bool, a figure that is no
  number, a status no run writes: compare and baseline refuse them in one line (exit 2);
- a baseline with no configs, a config with no counters, a negative counter, an unknown
  status or a key given twice is refused in one line.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from faultkit import finish, start
from test_faults_trust import ROW, cli, make_run

ROWS = [{**ROW, "key": f"spec=none,ps={ps}", "test_id": f"ps:{ps}"} for ps in (1, 2)]
META = {"suite": "tiny", "hardware": {"profile": "cpu"}}


def _baseline(root: Path, rows=ROWS) -> Path:
    """The profile's baseline, blessed by kvbench itself from ``rows``."""
    from harness.judge.baseline import build, write_baseline

    path = root / "baselines" / "cpu.json"
    write_baseline(path, build(rows, "cpu", "c0ffee")[0])
    return path


# -- R2: the sweep's gate --------------------------------------------------------------

class _Console:
    def __init__(self):
        self.lines: list[str] = []

    def print(self, text: str = "", **_):
        self.lines.append(str(text))


def _judge(root: Path, *, fail: bool = True, nights: Path | None = None) -> tuple[int, str]:
    """The sweep's verdict on run 'now' (ROWS, created at 10) under the results root."""
    from harness.grid.verdict import judge_sweep
    from harness.store.results import RunDir, load_rows

    run = RunDir(make_run(root, "now", ROWS, {**META, "created": 10.0}))
    console = _Console()
    opts = SimpleNamespace(fail_on_regression=fail, nights=str(nights) if nights else None)
    code = judge_sweep(run, load_rows(run.path), root, opts, console, console.print)
    return code, "\n".join(console.lines)


def _night(root: Path, name: str, created: float, text: str | None = None) -> Path:
    run = make_run(root, name, ROWS, {**META, "created": created})
    if text is not None:
        (run / "results.jsonl").write_text(text)
    return run


def test_sweep_gate_fails_when_the_baseline_is_not_json(tmp_path, tiny):
    """R2 as found: the nightly's gate against a garbage baseline, a real sweep, exit 0 before."""
    root = tmp_path / "results"
    (root / "baselines").mkdir(parents=True)
    (root / "baselines" / "cpu.json").write_text("garbage\n")
    code, out, err = finish(start(root, "sweep", tiny, "--no-mlflow", "-j", "1", "--fail-on-regression"))
    assert code == 2, (out, err)
    gate = [line for line in out.splitlines() if line.startswith("--fail-on-regression")]
    assert len(gate) == 1 and "cannot judge" in gate[0] and "not valid JSON" in gate[0], out
    assert (root / "runs").is_dir() and "Traceback" not in err  # the results stand


@pytest.mark.parametrize("damage", ["not JSON", "NaN", "another profile", "no configs", "a key twice"])
def test_sweep_gate_fails_on_a_baseline_it_cannot_read(tmp_path, damage):
    root = tmp_path / "results"
    path = _baseline(root)
    text = path.read_text()
    text = {"not JSON": "{",
            "NaN": text.replace('"leaked_pages": 0', '"leaked_pages": NaN', 1),
            "another profile": text.replace('"profile": "cpu"', '"profile": "h100"'),
            "no configs": json.dumps({**json.loads(text), "configs": {}}),
            "a key twice": text.replace(' "configs": {', ' "configs": {\n' + text.splitlines()[-3].rstrip(",") + ",")
            }[damage]
    path.write_text(text)
    code, out = _judge(root)
    assert code == 2 and "--fail-on-regression: the gate cannot judge this run: the baseline" in out, out


def test_sweep_gate_fails_on_a_damaged_previous_night(tmp_path):
    nights = tmp_path / "nights"
    _night(nights, "n1", 1.0)
    _night(nights, "n2", 2.0, json.dumps(ROWS[0]) + "\n{torn in the middle\n" + json.dumps(ROWS[1]) + "\n")
    root = tmp_path / "results"
    _baseline(root)
    code, out = _judge(root, nights=nights / "runs")
    assert code == 2 and "the previous run n2 cannot be read" in out, out


def test_sweep_gate_fails_on_a_previous_night_with_damaged_figures(tmp_path):
    nights = tmp_path / "nights"
    _night(nights, "n1", 1.0, json.dumps({**ROWS[0], "metrics": {}}) + "\n")
    code, out = _judge(tmp_path / "results", nights=nights / "runs")
    assert code == 2 and "previous run n1 cannot be read" in out and "holds no figure" in out, out


def test_sweep_gate_fails_with_nothing_to_judge_against(tmp_path):
    code, out = _judge(tmp_path / "results")
    assert code == 2 and "no baseline for profile cpu" in out and "no earlier run" in out, out


def test_sweep_gate_judges_past_a_crashed_night(tmp_path):
    """An earlier night that crashed before its first row is no comparison point: the one
    before it is (it used to be compared against, all configs 'new', clean)."""
    nights = tmp_path / "nights"
    _night(nights, "n1", 1.0)
    _night(nights, "n2", 2.0, "")
    code, out = _judge(tmp_path / "results", nights=nights / "runs")
    assert code == 0 and "compare against previous run n1: clean" in out, out


def test_sweep_gate_still_passes_a_clean_run_and_stays_off_without_the_flag(tmp_path):
    root = tmp_path / "results"
    _baseline(root)
    code, out = _judge(root)
    assert code == 0 and "compare against baseline cpu.json: clean" in out, out
    code, out = _judge(tmp_path / "bare", fail=False)
    assert code == 0 and "nothing to judge against" in out, out


# -- R3, R6: figures refused where they are read ----------------------------------------

BAD_ROWS = {
    "metrics {}": lambda r: r.update(metrics={}),
    "no metrics": lambda r: r.pop("metrics"),
    "a negative counter": lambda r: r["metrics"].update(leaked_pages=-3),
    "a bool counter": lambda r: r["metrics"].update(leaked_pages=False),
    "a bool violation count": lambda r: r["violations"].update(K3=True),
    "a negative violation count": lambda r: r["violations"].update(K3=-1),
    "a null timing": lambda r: r["metrics"].update(wall_s=None),
    "an unknown status": lambda r: r.update(status="weird"),
    "no status": lambda r: r.pop("status"),
}


def _runs(tmp_path: Path, damage) -> Path:
    root = tmp_path / "results"
    make_run(root, "good", ROWS)
    rows = json.loads(json.dumps(ROWS))
    for row in rows:
        damage(row)
    make_run(root, "bad", rows)
    _baseline(root)
    return root


@pytest.mark.parametrize("what", sorted(BAD_ROWS))
def test_damaged_figures_are_refused_never_compared_or_blessed(tmp_path, capsys, monkeypatch, what):
    root = _runs(tmp_path, BAD_ROWS[what])
    monkeypatch.setenv("KVBENCH_RESULTS", str(root))
    for argv in (["compare", "bad"], ["compare", "good", "bad"], ["compare", "bad", "good"],
                 ["baseline", "bad", "--out", root / "blessed.json"]):
        code, out, err = cli(argv, capsys)
        assert code == 2 and len(err) == 1 and "a gate cannot judge it" in err[0], (argv, out, err)
        assert "bless it" not in out
    assert not (root / "blessed.json").exists()


def test_a_failed_config_without_figures_is_still_judged(tmp_path, capsys, monkeypatch):
    """A crash's row has no figures by nature: compare calls it a regression, baseline skips it."""
    root = _runs(tmp_path, lambda r: r.update(metrics={}, status="failed", verdict="failed") if r["test_id"] == "ps:2"
                 else None)
    monkeypatch.setenv("KVBENCH_RESULTS", str(root))
    code, out, _ = cli(["compare", "bad"], capsys)
    assert code == 1 and "ok -> failed" in out and "bless it" not in out, out
    code, out, err = cli(["baseline", "bad", "--out", root / "b.json"], capsys)
    assert code == 0 and "1 failed configs not blessed" in out, err


def test_a_run_of_only_failed_configs_is_not_blessed(tmp_path, capsys, monkeypatch):
    root = _runs(tmp_path, lambda r: r.update(metrics={}, status="failed", verdict="failed"))
    monkeypatch.setenv("KVBENCH_RESULTS", str(root))
    code, out, err = cli(["baseline", "bad", "--out", root / "b.json"], capsys)
    assert code == 2 and len(err) == 1 and "no config of the run can be blessed" in err[0], (out, err)
    assert not (root / "b.json").exists()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          derandomize=True)
@given(value=st.one_of(st.booleans(), st.none(), st.text(max_size=4), st.integers(max_value=-1),
                       st.floats(max_value=-1e-9, allow_nan=False, allow_infinity=False)),
       where=st.sampled_from(["metrics.leaked_pages", "metrics.peak_pages_held", "violations.K1"]))
def test_no_impossible_counter_reaches_compare(tmp_path_factory, capsys, monkeypatch, value, where):
    """Property: whatever impossible count a row holds, compare refuses the run in one
    line naming the figure; it never judges it (as 0, as a move, as "bless it")."""
    field, name = where.split(".")
    root = _runs(tmp_path_factory.mktemp("p"), lambda r: r[field].update({name: value}))
    monkeypatch.setenv("KVBENCH_RESULTS", str(root))
    code, out, err = cli(["compare", "good", "bad"], capsys)
    assert code == 2 and len(err) == 1 and where in err[0], (out, err)


# -- R3, R6, R12: the baseline file ---------------------------------------------------------

def _entry(**over) -> dict:
    return {"counters": {"leaked_pages": 0, "peak_pages_held": 3}, "timings": {}, "status": "ok",
            "test_id": "ps:1", "suite": "tiny", **over}


BAD_BASELINES = {
    "no configs": ('{"profile": "cpu", "created": "", "git_commit": null, "configs": {}}', "configs must hold"),
    "no counters": (json.dumps({"profile": "cpu", "created": "", "git_commit": None,
                                "configs": {ROWS[0]["key"]: _entry(counters={})}}), "counters must hold"),
    "a negative counter": (json.dumps({"profile": "cpu", "created": "", "git_commit": None,
                                       "configs": {ROWS[0]["key"]: _entry(counters={"leaked_pages": -5})}}),
                           "leaked_pages must be a count"),
    "an unknown status": (json.dumps({"profile": "cpu", "created": "", "git_commit": None,
                                      "configs": {ROWS[0]["key"]: _entry(status="weird")}}), "status must be one of"),
    "a config key twice": ('{"profile": "cpu", "created": "", "git_commit": null, "configs": {\n'
                           f'  "{ROWS[0]["key"]}": {json.dumps(_entry(counters={"leaked_pages": 7}))},\n'
                           f'  "{ROWS[0]["key"]}": {json.dumps(_entry())}\n}}}}',
                           f"key {ROWS[0]['key']!r} is given twice"),
}


@pytest.mark.parametrize("what", sorted(BAD_BASELINES))
def test_a_baseline_that_would_pass_anything_is_refused(tmp_path, capsys, monkeypatch, what):
    text, words = BAD_BASELINES[what]
    root = tmp_path / "results"
    make_run(root, "now", ROWS[:1])
    base = tmp_path / "base.json"
    base.write_text(text)
    monkeypatch.setenv("KVBENCH_RESULTS", str(root))
    code, out, err = cli(["compare", "now", "--baseline", base], capsys)
    assert code == 2 and len(err) == 1 and words in err[0], (out, err)
    code, out, err = cli(["baseline", "now", "--out", base], capsys)  # never merged into, either
    assert code == 2 and len(err) == 1 and words in err[0], (out, err)
    assert base.read_text() == text


# -- a reference with nothing in common --------------------------------------------------

def _other_suite(rows=ROWS) -> list[dict]:
    return [{**r, "key": r["key"].replace("spec=none", "spec=eagle"), "suite": "other"} for r in rows]


def test_compare_against_a_reference_of_another_suite_cannot_judge(tmp_path, capsys, monkeypatch):
    """Every config 'new' was a clean exit 0: a baseline of another suite passed any run."""
    root = tmp_path / "results"
    make_run(root, "now", ROWS)
    _baseline(root, _other_suite())
    monkeypatch.setenv("KVBENCH_RESULTS", str(root))
    code, out, err = cli(["compare", "now"], capsys)
    assert code == 2 and "nothing was judged: exit 2" in out, (out, err)
    make_run(root, "then", _other_suite())
    code, out, err = cli(["compare", "then", "now"], capsys)
    assert code == 2 and "nothing was judged" in out, (out, err)


def test_sweep_gate_fails_when_no_reference_holds_a_config_of_the_run(tmp_path):
    root = tmp_path / "results"
    _baseline(root, _other_suite())
    code, out = _judge(root)
    assert code == 2 and "no config of the run is in its references" in out, out
