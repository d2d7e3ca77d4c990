"""kvbench history over three recorded nights: each planted move at the right commit."""

from __future__ import annotations

import pytest

from harness.judge import history
from recorded_nights import C1, C2, C3, REGRESSED, SLOWER, record


@pytest.fixture(scope="module")
def nights_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hist")
    record(tmp, tmp / "nights")
    return tmp / "nights"


def test_nights_are_ordered_by_start_not_name(nights_dir):
    nights = history.find_nights(nights_dir, "nightsuite")
    assert [n.commit for n in nights] == [C1, C2, C3]
    assert [n.name for n in nights] == ["night-a", "night-b", "night-c"][::-1]
    assert history.find_nights(nights_dir, "other") == []


def test_moves_are_attributed_to_the_commit_they_appeared_at(nights_dir):
    hist = history.build(history.find_nights(nights_dir, "nightsuite"))
    moves = {(hist.names[m.key], m.metric): m for m in hist.moves}
    assert set(moves) == {(REGRESSED, "peak_pages_held"), (SLOWER, "wall_s")}
    pages = moves[(REGRESSED, "peak_pages_held")]
    assert (pages.good, pages.bad, pages.night, pages.verdict) == (C1, C2, 1, "regression")
    assert pages.after == pages.before + 1
    slow = moves[(SLOWER, "wall_s")]
    assert (slow.good, slow.bad, slow.verdict) == (C2, C3, "regression")  # counted once: not again at C3
    assert "p=" in slow.change


def test_cli_shows_the_last_nights_with_their_commits(nights_dir, cli, capsys):
    assert cli("history", "nightsuite", "--nights", nights_dir) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "kvbench history nightsuite: 3 nights, oldest first"
    line = next(l for l in out.splitlines() if l.strip().startswith("peak_pages_held"))
    v = int(line.split()[1])
    assert line.split()[1:4] == [str(v), str(v + 1), str(v + 1)]
    assert f"regression at {C2[:10]} (range {C1[:10]}..{C2[:10]}, +1" in line
    assert f"regression at {C3[:10]} (range {C2[:10]}..{C3[:10]}" in out
    assert "2 figures moved over 3 nights (2 regressions, 0 improvements, 0 changed)" in out
    # The last two nights only: the page change happened before them, the timing one in them.
    assert cli("history", "nightsuite", "--nights", nights_dir, "--last", "2") == 0
    out = capsys.readouterr().out
    assert "peak_pages_held" not in out and "1 figures moved over 2 nights" in out
    # --metric shows a figure that never moved, per night.
    assert cli("history", "nightsuite", "--nights", nights_dir, "--metric", "leaked_pages",
               "--config", REGRESSED, "--format", "markdown") == 0
    out = capsys.readouterr().out
    assert f"**`{REGRESSED}`**" in out and f"| metric | `{C1[:10]}` | `{C2[:10]}` | `{C3[:10]}` | moved |" in out
    assert "| `leaked_pages` | 0 | 0 | 0 |  |" in out


def test_default_nights_are_the_results_root_runs(nights_dir, results_root, cli, capsys, tmp_path):
    import shutil

    shutil.copytree(nights_dir, results_root / "runs")
    assert cli("history", "nightsuite") == 0
    assert "3 nights" in capsys.readouterr().out
    # Several roots (say, one unpacked results artifact per night), a run given twice counted once.
    for name in ("night-a", "night-b"):
        shutil.copytree(nights_dir / name, tmp_path / f"artifact-{name}" / "runs" / name)
    assert cli("history", "nightsuite", "--nights", tmp_path / "artifact-night-a", "--nights",
               tmp_path / "artifact-night-b", "--nights", results_root / "runs", "--nights", results_root) == 0
    assert "3 nights, oldest first" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--last", "1"], "--last must be an integer >= 2 (got 1)"),
    (["--nights", "/nonexistent/nights"], "is not a directory"),
])
def test_bad_input_is_one_line(nights_dir, cli, capsys, argv, message):
    argv = ["history", "nightsuite", *(["--nights", nights_dir] if "--nights" not in argv else []), *argv]
    assert cli(*argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_an_unknown_suite_says_where_it_looked(nights_dir, cli, capsys):
    assert cli("history", "nope", "--nights", nights_dir) == 2
    assert "no run of suite 'nope'" in capsys.readouterr().err


def test_timings_of_another_machine_do_not_move(nights_dir, tmp_path):
    """A night measured on other hardware: its counters still compare, its timings do not."""
    import json
    import shutil

    mixed = tmp_path / "mixed"
    shutil.copytree(nights_dir, mixed)
    meta = json.loads((mixed / "night-a" / "meta.json").read_text())  # the newest night (C3)
    meta["hardware"] = {"profile": "h100"}
    (mixed / "night-a" / "meta.json").write_text(json.dumps(meta))
    hist = history.build(history.find_nights(mixed, "nightsuite"))
    assert {(hist.names[m.key], m.metric) for m in hist.moves} == {(REGRESSED, "peak_pages_held")}
