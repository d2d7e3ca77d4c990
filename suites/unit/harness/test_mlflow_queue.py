"""The controller's MLflow uploads in a background thread: every row arrives, whole.

A real sqlite store in a temporary directory; nothing is killed. What must hold once
the queue is closed: every recorded row is one FINISHED child run carrying every
metric (scalars and each series point) and param its synchronous upload would
have logged, marked logged in the run directory, so the end of the sweep finds
nothing pending; a queue closed without draining (a Ctrl-C) leaves the rest pending
for sync, which then uploads them.
"""

from __future__ import annotations

import threading

from harness.grid.execute import GridSession
from harness.grid.suites import Suite
from harness.store.results import RunDir
from harness.view import mlflow_layout as layout
from harness.view.mlflow_log import Logger, all_children, client, ensure_experiment, ensure_parent, key_hash, sync
from harness.view.mlflow_queue import UploadQueue
from test_pieces import fake_row


def _store(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run = RunDir(tmp_path / "runs" / "bg")
    run.path.mkdir(parents=True)
    meta = {"suite": "unit", "mlflow_uri": uri, "hardware": {"profile": "cpu"}}
    cl = client(uri)
    exp = ensure_experiment(cl, "kvbench-unit", uri, tmp_path)
    parent = ensure_parent(cl, exp, "bg", meta)
    run.write_meta({**meta, "mlflow_parent": parent, "mlflow_experiment": exp})
    logger = Logger(uri, "unit", "bg", parent, tmp_path, "kvbench-unit")
    suite = Suite(name="unit", path=tmp_path / "unit.toml", digest="x", repeat=1, marks=(), configs=[])
    return uri, run, cl, exp, GridSession(suite, run, logger, background=True)


def rows(n: int) -> list[dict]:
    return [fake_row(i, key=f"k{i}", test_id=f"t{i}") for i in range(n)]


def test_background_uploads_arrive_whole_once_the_queue_is_closed(tmp_path):
    uri, run, cl, exp, session = _store(tmp_path)
    recorded = rows(6)
    for row in recorded:
        session.record(row)
    assert session.uploads is not None and session.uploads._thread.is_alive()
    session.finish_uploads()
    children = all_children(cl, exp, "bg")
    assert set(children) == {key_hash(r["key"]) for r in recorded}
    for row in recorded:
        [child] = children[key_hash(row["key"])]
        got = cl.get_run(child.info.run_id)
        assert got.info.status == "FINISHED"
        assert got.data.metrics == layout.scalar_metrics(row) | {  # every scalar, the series' last points
            name: values[-1] for name, values in _last(layout.series_metrics(row)).items()}
        for name, points in _history(layout.series_metrics(row)).items():
            assert [(m.step, m.value) for m in cl.get_metric_history(child.info.run_id, name)] == points
        assert got.data.params["page_size"] == str(row["config"]["page_size"])
    assert run.logged_keys() == {r["key"] for r in recorded}  # nothing pending for the end of the sweep
    assert sync(run, uri, root=tmp_path) == (0, len(recorded))


def _history(series: list[tuple[str, int, float]]) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {}
    for name, step, value in series:
        out.setdefault(name, []).append((step, value))
    return out


def _last(series):
    return {name: [v for _, v in points] for name, points in _history(series).items()}


def test_a_queue_closed_without_draining_leaves_the_rest_to_sync(tmp_path):
    uri, run, cl, exp, session = _store(tmp_path)
    gate = threading.Event()
    upload = session.upload

    def held(row):  # the first upload waits until the queue is told to stop, as a Ctrl-C would find it
        gate.wait(10)
        return upload(row)

    session.uploads = UploadQueue(held)
    recorded = rows(4)
    for row in recorded:
        session.record(row)
    closer = threading.Thread(target=session.finish_uploads, kwargs={"drain": False})
    closer.start()
    assert session.uploads._drop.wait(10)  # told to stop while the first row is in flight
    gate.set()
    closer.join(10)
    assert not closer.is_alive()
    logged = run.logged_keys()
    assert len(logged) <= 1  # the row in flight at most
    assert sync(run, uri, root=tmp_path) == (len(recorded) - len(logged), len(logged))
    assert run.logged_keys() == {r["key"] for r in recorded}
