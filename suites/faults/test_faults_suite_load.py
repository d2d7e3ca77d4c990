"""`kvbench sweep --list` validates a suite as `kvbench sweep` does, through the same
code: it listed the ids of suites the sweep refused (R7), and a session longer than
max_context loaded and failed only when its config ran."""

from __future__ import annotations

import pytest

from test_faults_trust import cli

GRID = "[defaults]\nnum_requests = 2\ninput_len = 16\noutput_len = 8\nmin_len = 8\nmax_context = 128\n" \
       "[axes]\npage_size = [1, 16]\n"


@pytest.mark.parametrize("axis, says", [
    ('prefix_cache = ["radix", "bogus"]', "prefix_cache must be one of"),
    ("turns = [0]", "turns must be an integer >= 1"),
    ("shared_prefix = [-1]", "shared_prefix must be an integer >= 0"),
    ('admission = ["greedy"]', "admission must be one of"),
    ('retraction = ["never"]', "retraction must be one of"),
    ("capacity = [1]", "unknown option 'capacity'"),
    ("turns = [50]", "max_context=128 is below the last of turns=50"),  # refused at load, not a failed row
])
def test_list_refuses_what_the_sweep_refuses(tmp_path, capsys, monkeypatch, axis, says):
    monkeypatch.setenv("KVBENCH_RESULTS", str(tmp_path / "results"))
    suite = tmp_path / "s.toml"
    suite.write_text(GRID + axis + "\n")
    listed = cli(["sweep", suite, "--list"], capsys)
    swept = cli(["sweep", suite, "--no-mlflow"], capsys)
    assert listed[0] == swept[0] == 2 and not listed[1]  # no id printed
    assert listed[2] == swept[2] and len(listed[2]) == 1 and says in listed[2][0], (listed, swept)
    assert not (tmp_path / "results" / "runs").exists() or not any((tmp_path / "results" / "runs").iterdir())


def test_a_session_that_fits_still_lists(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KVBENCH_RESULTS", str(tmp_path / "results"))
    suite = tmp_path / "s.toml"
    suite.write_text(GRID + "turns = [1, 4]\n")  # 4 turns of 16 + 8 tokens: 96 <= 128
    code, out, err = cli(["sweep", suite, "--list"], capsys)
    assert code == 0 and out.split() == ["ps:1-turns:1", "ps:1-turns:4", "ps:16-turns:1", "ps:16-turns:4"], err
