"""Tracebacks where one line is promised (N16): damaged run fields that history and
report index or format, huge integer options, a plugin that does not import, a results
root that is a loop of links."""

from __future__ import annotations


import pytest

from test_faults_trust import ROW, cli, make_run

DAMAGE = {
    "hardware a list": ({"suite": "tiny", "hardware": [1]}, {}, "hardware"),
    "created -1e18": ({"suite": "tiny", "created": -1e18}, {}, "created"),
    "created a string": ({"suite": "tiny", "created": "x"}, {}, "created"),
    "samples a string": ({"suite": "tiny"}, {"samples": "x"}, "samples"),
    "config a string": ({"suite": "tiny"}, {"config": "x"}, "config"),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
@pytest.mark.parametrize("command", ["report", "history"])
def test_a_damaged_run_is_one_line(tmp_path, capsys, monkeypatch, case, command):
    meta, change, field = DAMAGE[case]
    make_run(tmp_path, "n1", [{**ROW, **change}], meta)
    monkeypatch.setenv("KVBENCH_RESULTS", str(tmp_path))
    argv = (["report", tmp_path / "runs" / "n1", "--out", tmp_path / "r.html"] if command == "report"
            else ["history", "tiny", "--nights", tmp_path / "runs"])
    code, _, err = cli(argv, capsys)
    assert code == 2 and len(err) == 1 and field in err[0], err


def test_a_huge_integer_option_is_one_line(capsys):
    code, _, err = cli(["run", "--vocab-size", str(10**20)], capsys)
    assert code == 2 and len(err) == 1 and "vocab_size must be an integer <=" in err[0], err


@pytest.mark.parametrize("body", ["def (\n", "raise RuntimeError('boom')\n"])
def test_a_plugin_that_does_not_import_is_one_line(tmp_path, body, monkeypatch):
    import sys

    from mini_engine.algos import load_plugins
    from mini_engine.errors import ConfigError

    (tmp_path / "kvplug_bad.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match="KVBENCH_PLUGINS: module 'kvplug_bad' failed to import"):
        load_plugins("kvplug_bad")
    sys.modules.pop("kvplug_bad", None)


def test_a_results_root_that_loops_is_one_line(tmp_path, capsys, monkeypatch):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    monkeypatch.setenv("KVBENCH_RESULTS", str(tmp_path / "a"))
    code, _, err = cli(["compare", "x"], capsys)
    assert code == 2 and len(err) == 1 and "loop of symbolic links" in err[0], err
