"""Input that picked a reading silently is refused in one line (N17, L8): an empty
--align, --run-id or $KVBENCH_RESULTS, --no-mlflow with --mlflow-uri, an unknown
--metric or --heatmap."""

from __future__ import annotations

import pytest

from test_faults_trust import cli, make_run


@pytest.mark.parametrize("argv, env, words", [
    (["run", "--align", ""], {}, "align must be all, none"),
    (["run", "--align", "  "], {}, "align must be all, none"),
    (["sweep", "smoke", "--run-id", ""], {}, "--run-id must be"),
    (["sweep", "smoke", "--no-mlflow", "--mlflow-uri", "sqlite:///x.db"], {}, "contradict"),
    (["compare", "x"], {"KVBENCH_RESULTS": ""}, "KVBENCH_RESULTS is set but empty"),
    (["report", "art", "--metric", "peak_pages_hel"], {}, "--metric must name a declared metric"),
    (["report", "art", "--heatmap", "nope"], {}, "--heatmap must name a declared metric"),
    (["history", "tiny", "--metric", "nope"], {}, "--metric must name a declared metric"),
])
def test_silent_readings_are_refused(tmp_path, capsys, monkeypatch, argv, env, words):
    make_run(tmp_path / "results")
    monkeypatch.setenv("KVBENCH_RESULTS", str(tmp_path / "results"))
    monkeypatch.chdir(tmp_path)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    code, _, err = cli(argv + (["--out", tmp_path / "r.html"] if argv[0] == "report" else []), capsys)
    assert code == 2 and len(err) == 1 and words in err[0], err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "r.html").exists()


def test_known_metrics_still_chart(tmp_path, capsys, monkeypatch):
    make_run(tmp_path / "results")
    monkeypatch.setenv("KVBENCH_RESULTS", str(tmp_path / "results"))
    code, _, err = cli(["report", "art", "--metric", "leaked_pages", "--metric", "violations.K1",
                        "--out", tmp_path / "r.html"], capsys)
    assert code == 0, err


@pytest.mark.parametrize("what", ["busy port", "bad host", "garbage store"])
def test_ui_that_cannot_serve_is_one_line(tmp_path, capsys, monkeypatch, what):
    """L8/N18: a busy port or an invalid host exited 0 after up to a minute; a garbage store was a traceback."""
    import socket

    root = tmp_path / "results"
    root.mkdir()
    (root / "mlflow.db").write_bytes(b"not a database" if what == "garbage store" else b"")
    monkeypatch.setenv("KVBENCH_RESULTS", str(root))
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    try:
        argv = ["ui", "--port", port, "--host", "no such host..invalid" if what == "bad host" else "127.0.0.1"]
        if what == "garbage store":
            busy.close()
        code, _, err = cli(argv, capsys)
    finally:
        busy.close()
    assert code == 2 and len(err) == 1 and err[0].startswith("kvbench: error: "), err


@pytest.mark.parametrize("argv, words", [
    (["--sigma", "2"], "--sigma applies to --workload lognormal only"),
    (["--workload", "pd", "--sigma", "2"], "--sigma applies to --workload lognormal only"),
    (["--pd-fraction", "0.5"], "--pd-fraction applies to --workload pd only"),
    (["--temperature", "0.7"], "--temperature applies to a real model only"),
])
def test_run_flags_for_another_kind_of_run_are_refused(capsys, argv, words):
    """L8: --sigma/--pd-fraction with a uniform workload, --temperature without a model: ignored silently."""
    code, _, err = cli(["run", *argv], capsys)
    assert code == 2 and len(err) == 1 and words in err[0], err


@pytest.mark.parametrize("text", ["page_size = 16\n[engine]\npage_size = 1\n",
                                  "[engine]\nnum_requests = 2\n[workload]\nnum_requests = 3\n"])
def test_an_option_set_twice_in_a_config_file_is_refused(tmp_path, capsys, text):
    """L8: top-level page_size and [engine] page_size: one won silently."""
    path = tmp_path / "c.toml"
    path.write_text(text)
    code, _, err = cli(["run", "--config", path], capsys)
    assert code == 2 and len(err) == 1 and "set both" in err[0], err
