"""A tracking URI MLflow cannot track to (a bad scheme, a typo, a bare word) is one
line naming where it came from, exit 2, before a sweep runs a config; a good one of
every kind MLflow opens passes. (A server that refuses connections is another case:
the sweep keeps its rows and names `kvbench sync`, test_sweep_e2e.)"""

from __future__ import annotations

import pytest

from harness.core.errors import UsageError
from harness.view.mlflow_store import check_uri

from test_sweep_e2e import SUITE


@pytest.mark.parametrize("uri", ["http://mlflow.lan:5000", "https://mlflow.example/", "sqlite:////tmp/mlflow.db",
                                 "postgresql://mlflow@db:5432/mlflow", "postgresql+psycopg://u:p@db/m",
                                 "mysql+pymysql://u@db/m"])
def test_uris_mlflow_tracks_to_pass(uri):
    assert check_uri(uri, "--mlflow-uri") == uri


@pytest.mark.parametrize("uri", ["ftp://host/x", "htp://127.0.0.1:5000", "mlflow.lan:5000", "nonsense", "http://",
                                 "./mlruns", "file:///tmp/mlruns"])
def test_other_uris_are_one_line_naming_the_source(uri):
    with pytest.raises(UsageError, match="MLFLOW_TRACKING_URI must be http") as err:
        check_uri(uri, "MLFLOW_TRACKING_URI")
    assert "\n" not in str(err.value)


def test_a_sweep_with_a_bad_scheme_stops_before_any_config(results_root, tmp_path, cli, capsys):
    suite = tmp_path / "e2e.toml"
    suite.write_text(SUITE)
    assert cli("sweep", suite, "--run-id", "bad", "--mlflow-uri", "htp://127.0.0.1:5000") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--mlflow-uri must be" in err[0] and "htp://" in err[0]
    assert not (results_root / "runs" / "bad").exists()


def test_sync_with_a_bad_environment_uri_names_the_variable(results_root, cli, capsys, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "ftp://host/x")
    (results_root / "runs" / "r1").mkdir(parents=True)
    assert cli("sync", "r1") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "MLFLOW_TRACKING_URI must be" in err[0]
