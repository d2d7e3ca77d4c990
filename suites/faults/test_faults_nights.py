"""One crashed, empty or partial night among the kept ones: the nightly's report skips
it in one line, and history neither compares against it nor loses the moves of the
configs it lacks (N6)."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_faults_trust import ROW, cli, make_run

KEYS = [f"spec=none,ps={ps}" for ps in (1, 2, 4, 8)]


def _rows(held: int, keys=KEYS) -> list[dict]:
    return [{**ROW, "key": k, "test_id": k.split(",")[1], "metrics": {**ROW["metrics"], "peak_pages_held": held}}
            for k in keys]


def _night(root: Path, name: str, created: float, rows) -> Path:
    meta = {"suite": "tiny", "hardware": {"profile": "cpu"}, "created": created, "git_commit": name * 5}
    return make_run(root, name, rows, meta)


def _nights(root: Path, middle: str) -> None:
    """h1, h2 good; a bad middle night (created between h2 and h3); h3 regressed (5 -> 9 pages)."""
    _night(root, "h1", 1.0, _rows(5))
    _night(root, "h2", 2.0, _rows(5))
    if middle == "empty":
        _night(root, "hm", 2.5, [])
    elif middle == "partial":
        _night(root, "hm", 2.5, _rows(5, KEYS[:1]))
    elif middle == "no meta":
        (root / "runs" / "hm").mkdir(parents=True)
    _night(root, "h3", 3.0, _rows(9))


@pytest.mark.parametrize("middle", ["empty", "partial", "no meta"])
def test_history_sees_the_regression_across_a_bad_night(tmp_path, capsys, middle):
    _nights(tmp_path, middle)
    code, out, err = cli(["history", "tiny", "--nights", tmp_path / "runs"], capsys)
    assert code == 0, err
    # every config moved on h3, against the newest night that measured it (in pages, and
    # in the token figure read beside them)
    moved = [line for line in out.splitlines() if "regression at h3h3h3h3h3" in line]
    assert sum(line.lstrip().startswith("peak_pages_held") for line in moved) == len(KEYS), out
    assert "range h2h2h2h2h2" in out


@pytest.mark.parametrize("middle", ["empty", "no meta"])
def test_report_skips_an_empty_night_in_one_line(tmp_path, capsys, monkeypatch, middle):
    _nights(tmp_path, middle)
    monkeypatch.setenv("KVBENCH_RESULTS", str(tmp_path))
    runs = sorted((tmp_path / "runs").iterdir())
    out = tmp_path / "r.html"
    code, stdout, err = cli(["report", *runs, "--out", out], capsys)
    assert code == 0 and out.is_file(), err
    assert len(err) == 1 and "skipping" in err[0] and "hm" in err[0], err
    assert "3 runs" in stdout


def test_report_of_only_empty_runs_is_one_line(tmp_path, capsys, monkeypatch):
    _night(tmp_path, "hm", 1.0, [])
    code, _, err = cli(["report", tmp_path / "runs" / "hm", "--out", tmp_path / "r.html"], capsys)
    assert code == 2 and len(err) == 1 and "has no results" in err[0], err
