"""`kvbench ui` where the MLflow server cannot serve: a host that does not resolve or a
port already taken is one line and exit 2, before any server starts (the server itself
logs such a failure and exits 0)."""

from __future__ import annotations

import socket

import pytest


@pytest.fixture
def store(tmp_path, monkeypatch):
    (tmp_path / "mlflow.db").write_bytes(b"")
    monkeypatch.setenv("KVBENCH_RESULTS", str(tmp_path))
    # Nothing may start a server here: a test that got that far has failed.
    monkeypatch.setattr("subprocess.call", lambda *a, **k: pytest.fail(f"a server was started: {a}"))
    return tmp_path


def test_a_port_in_use_is_refused(store, cli, capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert cli("ui", "--port", port) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"--port {port}" in err and "Traceback" not in err, err


@pytest.mark.parametrize("host", ["no-such-host.invalid", "bad host\n## x", "999.1.1.1"])
def test_an_invalid_host_is_refused(host, store, cli, capsys):
    assert cli("ui", "--host", host, "--port", 5999) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--host" in err, err
