"""The first night on a fresh server: runners that start together all find no
experiment and all create it. The losers must read the winner's experiment, not give
up (a runner without an experiment ran without a parent: nothing logged live, no
system metrics). Deterministic here: the other runner creates it between this
runner's read and its create, on a real sqlite store."""

from __future__ import annotations

import pytest

from harness.view.mlflow_log import client, ensure_experiment
from harness.view.mlflow_store import MlflowUnavailable


class LateReader:
    """A client whose first lookup by name happens before another runner's create."""

    def __init__(self, cl, on_first_read):
        self._cl, self._on_first_read, self.reads, self.creates = cl, on_first_read, 0, 0

    def get_experiment_by_name(self, name):
        self.reads += 1
        if self.reads == 1:
            self._on_first_read(name)
            return None  # what it read before the other runner's create landed
        return self._cl.get_experiment_by_name(name)

    def create_experiment(self, *args, **kwargs):
        self.creates += 1
        return self._cl.create_experiment(*args, **kwargs)

    def __getattr__(self, attr):
        return getattr(self._cl, attr)


def test_experiment_created_by_another_runner_between_read_and_create_is_read_back(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    other = client(uri)
    made = {}
    late = LateReader(client(uri), lambda name: made.setdefault("id", ensure_experiment(other, name, uri, tmp_path)))
    got = ensure_experiment(late, "kvbench-race", uri, tmp_path, "a suite")
    assert got == made["id"]
    assert late.creates == 1 and late.reads == 2  # it tried, lost, read the winner's
    exp = other.get_experiment_by_name("kvbench-race")
    assert exp.tags["mlflow.note.content"].startswith("a suite")  # the loser's note is still set
    assert len(other.search_experiments(filter_string="name = 'kvbench-race'")) == 1


def test_any_other_create_failure_is_one_line_not_a_retry(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"

    class Refusing(LateReader):
        def create_experiment(self, *args, **kwargs):
            self.creates += 1
            raise PermissionError("permission denied for table experiments")

    cl = Refusing(client(uri), lambda name: None)
    with pytest.raises(MlflowUnavailable, match="cannot be reached: .*permission denied") as err:
        ensure_experiment(cl, "kvbench-race", uri, tmp_path)
    assert cl.creates == 1 and "\n" not in str(err.value)
