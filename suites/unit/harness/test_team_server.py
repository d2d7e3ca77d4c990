"""The team server, for real: Debian's PostgreSQL and `mlflow server --serve-artifacts`
with two workers, started by ci/mlflow-server/serve.sh, and four sweeps at once from
four "runners" against it while it is brand new, as the nightly's four GPU jobs do.

What must hold: every runner has its parent before the first config (the first-night
race to create the experiment is won or read back, so every runner logs live); a
server restarted mid-night loses nothing (rows stay on disk, `kvbench sync` completes
them); in the end every config is one child run, exactly once, every parent is
FINISHED with its aggregates and system metrics, and every run says which runner made it.

PostgreSQL comes from `apt-get install postgresql` (.ci/run installs it). Without it the
test skips with the reason; under CI (CI=true, or KVBENCH_REQUIRE_POSTGRES=1 as .ci/run
sets it) that skip is a failure.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from harness.store.results import RunDir, load_rows
from harness.view.mlflow_log import client, experiment_name, key_hash

from test_mlflow_server import free_port
from test_sweep_e2e import SUITE

SERVE = Path(__file__).resolve().parents[3] / "ci" / "mlflow-server" / "serve.sh"
RUNNERS = ("1-gpu-5090", "1-gpu-h100", "1-gpu-h200", "8-gpu-h200")
N_CONFIGS = 4  # per sweep: both policies at two page sizes
GITHUB = {"GITHUB_EVENT_NAME": "schedule", "GITHUB_SERVER_URL": "https://github.example",
          "GITHUB_REPOSITORY": "org/kvbench", "GITHUB_RUN_ID": "9001"}


def missing_postgres() -> str | None:
    """Why this machine cannot run the server, or None."""
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if not bins:
        return "PostgreSQL is not installed (apt-get install postgresql; .ci/run does)"
    if os.geteuid() == 0 and not shutil.which("runuser"):
        return "running as root without runuser: PostgreSQL's initdb refuses root"
    try:
        import psycopg  # noqa: F401  the driver SQLAlchemy uses for postgresql://
    except ImportError:
        return "the PostgreSQL driver is missing: pip install 'kvbench[server]'"
    return None


@pytest.fixture
def team_server():
    why = missing_postgres()
    if why:
        if os.environ.get("CI", "").lower() == "true" or os.environ.get("KVBENCH_REQUIRE_POSTGRES"):
            pytest.fail(f"CI must run the team server test: {why}")
        pytest.skip(why)
    # Not under pytest's tmp_path: its root is private to this user, and PostgreSQL runs
    # as the postgres user when the tests run as root.
    state = Path(tempfile.mkdtemp(prefix="kvbench-team-server-"))
    port = free_port()
    env = dict(os.environ, MLFLOW_SERVER_DIR=str(state), MLFLOW_PORT=str(port), PG_PORT=str(free_port()),
               MLFLOW_WORKERS="2", MLFLOW=str(Path(sys.executable).parent / "mlflow"))

    def serve(action: str) -> None:
        done = subprocess.run([str(SERVE), action], env=env, capture_output=True, text=True, timeout=400)
        log = state / "server.log"
        assert done.returncode == 0, done.stderr + (log.read_text()[-3000:] if log.exists() else "")

    try:
        yield f"http://127.0.0.1:{port}", serve
    finally:
        subprocess.run([str(SERVE), "stop"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(state, ignore_errors=True)


def start_sweep(suite: Path, root: Path, runner: str, uri: str) -> subprocess.Popen:
    # A runner's environment: none of this pytest's (an xdist worker's variables) or a rerun's PR.
    env = {k: v for k, v in os.environ.items()
           if k not in ("KVBENCH_PR", "MLFLOW_TRACKING_URI") and not k.startswith("PYTEST_")}
    env.update(GITHUB, KVBENCH_RESULTS=str(root), RUNNER_LABEL=runner, MLFLOW_TRACKING_URI=uri,
               MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL="0.5")  # a short sweep still samples the machine
    return subprocess.Popen([sys.executable, "-m", "harness.cli", "sweep", str(suite), "--run-id", f"night-{runner}",
                             "-j", "1"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def wait_until_every_runner_logs_live(runs: list[RunDir], procs: list[subprocess.Popen]) -> None:
    """Every sweep has its parent (none lost the race) and one config on the server."""
    end = time.time() + 400
    while not all(r.meta().get("mlflow_parent") and r.logged_keys() for r in runs):
        for r, p in zip(runs, procs):
            if p.poll() is not None and not r.meta().get("mlflow_parent"):
                pytest.fail(f"{r.run_id} ran without a parent: {p.stdout.read()[-3000:]}")
        assert time.time() < end, "not every runner reached the server"
        time.sleep(0.1)


@pytest.mark.slow
def test_four_runners_on_a_fresh_postgres_server_restarted_mid_night(team_server, tmp_path, cli, monkeypatch,
                                                                    capsys):
    uri, serve = team_server
    t0 = time.monotonic()
    phase = lambda name: print(f"{name}: {time.monotonic() - t0:.0f} s")  # noqa: E731  shown by -rP
    serve("start")
    phase("fresh server up")
    suite = tmp_path / "team.toml"
    suite.write_text(SUITE.replace('name = "e2e"', 'name = "team"').replace("seed = [1, 2]", "seed = [1]"))
    roots = [tmp_path / runner for runner in RUNNERS]  # one results root per machine
    runs = [RunDir(root / "runs" / f"night-{runner}") for root, runner in zip(roots, RUNNERS)]
    procs = [start_sweep(suite, root, runner, uri) for root, runner in zip(roots, RUNNERS)]
    try:
        wait_until_every_runner_logs_live(runs, procs)
        phase("every runner logging live")
        serve("stop-server")
        assert any(p.poll() is None for p in procs), "every sweep ended before the restart: not mid-night"
        serve("start")
        phase("server restarted")
        outs = [p.communicate(timeout=600)[0] for p in procs]
        phase("four sweeps done")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out
    for root, run in zip(roots, runs):
        assert len(load_rows(run.path)) == N_CONFIGS  # nothing lost while the server was down
        monkeypatch.setenv("KVBENCH_RESULTS", str(root))
        assert cli("sync", run.run_id, "--mlflow-uri", uri) == 0, capsys.readouterr()
    phase("four syncs done")

    cl = client(uri)
    assert [e.name for e in cl.search_experiments(filter_string="name LIKE 'kvbench-team%'")] == ["kvbench-team"]
    exp = cl.get_experiment_by_name(experiment_name("team")).experiment_id
    for runner, run in zip(RUNNERS, runs):
        mine = cl.search_runs([exp], filter_string=f"tags.`kvbench.run` = '{run.run_id}'", max_results=1000)
        parents = [r for r in mine if r.data.tags["kvbench.role"] == "parent"]
        children = [r for r in mine if r.data.tags["kvbench.role"] == "config"]
        assert len(parents) == 1, f"{runner}: {len(parents)} parents"
        parent = parents[0]
        assert parent.info.status == "FINISHED", runner
        assert parent.data.metrics["sweep/configs"] == N_CONFIGS
        assert "memory/peak_tokens_held.max/all" in parent.data.metrics  # the night's aggregates
        assert any(k.startswith("system/") for k in parent.data.metrics), f"{runner}: no system metrics"
        hashes = sorted(r.data.tags["kvbench.key_hash"] for r in children)
        assert hashes == sorted(key_hash(row["key"]) for row in load_rows(run.path)), f"{runner}: lost or doubled"
        assert all(r.info.status == "FINISHED" and r.data.tags["mlflow.parentRunId"] == parent.info.run_id
                   for r in children)
        for r in mine:  # who made it, on the parent and every config run
            t = r.data.tags
            assert (t["runner"], t["trigger"], t["pr"], t["gpu_count"]) == (runner, "schedule", "none", "0")
            assert t["ci_run_url"] == "https://github.example/org/kvbench/actions/runs/9001"
        assert run.logged_keys() == {row["key"] for row in load_rows(run.path)}
