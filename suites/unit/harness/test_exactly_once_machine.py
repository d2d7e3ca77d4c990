"""Exactly once, as a property: any interleaving of configs finishing, processes dying
mid-upload, the tracking server going away and coming back, resumes and syncs ends
with every finished config once in results.jsonl and, after a sync, once in MLflow.

The pieces are the real ones (GridSession, Logger, sync, a sqlite MLflow store);
"the server is down" is a Logger pointed at a closed port, "a process died
mid-upload" is a child run left RUNNING, as a SIGKILL leaves it.
"""

from __future__ import annotations

import collections
import json
import uuid
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from harness.grid.execute import GridSession
from harness.grid.suites import load_suite
from harness.store.results import RunDir
from harness.view.mlflow_log import Logger, all_children, client, ensure_experiment, ensure_parent, key_hash, sync

SUITE = """
name = "once"
[defaults]
spec = "dflash"
num_requests = 2
input_len = 16
output_len = 8
pool_tokens = 1024
profile = "floor-free"
[axes]
page_size = [1, 16]
policy = ["aligned", "unaligned"]
seed = [1, 2]
[[expect]]
when = { policy = "unaligned", page_size = { min = 2 } }
status = ["violated", "pool_exhausted"]
violations = { K8 = { min = 1 } }
metrics = { leaked_pages = { min = 1 } }
"""
DEAD = "http://127.0.0.1:9"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("once")
    (root / "once.toml").write_text(SUITE)
    uri = f"sqlite:///{root / 'mlflow.db'}"
    cl = client(uri)
    exp = ensure_experiment(cl, "kvbench-once", uri, root)
    return root, uri, cl, exp, load_suite(root / "once.toml")


def test_exactly_once_under_kills_outages_resumes_and_syncs(store):
    root, uri, cl, exp, suite = store

    class Machine(RuleBasedStateMachine):
        @initialize()
        def start(self):
            self.run_id = f"once-{uuid.uuid4().hex[:12]}"
            self.run = RunDir(root / "runs" / self.run_id)
            self.run.path.mkdir(parents=True)
            meta = {"suite": "once", "mlflow_uri": uri, "hardware": {"profile": "cpu"}}
            self.parent = ensure_parent(cl, exp, self.run_id, meta)
            self.run.write_meta({**meta, "mlflow_parent": self.parent})
            self.server_up = True

        def pending_configs(self):
            # What a resumed sweep would run: configs whose key is not in results.jsonl.

            done = self.run.done_keys()
            return [gc for gc in suite.configs if gc.spec.key not in done]

        def session(self, logger):
            return GridSession(suite, self.run, logger)

        @precondition(lambda self: self.pending_configs())
        @rule(data=st.data())
        def a_config_finishes(self, data):
            gc = data.draw(st.sampled_from(self.pending_configs()))
            logger = Logger(uri if self.server_up else DEAD, "once", self.run_id, self.parent, root)
            self.session(logger).run(gc)

        @precondition(lambda self: self.pending_configs())
        @rule(data=st.data())
        def the_process_dies_mid_upload(self, data):
            gc = data.draw(st.sampled_from(self.pending_configs()))
            row = self.session(None).run(gc)  # the row reached the disk; the upload did not finish
            if self.server_up:
                cl.create_run(exp, tags={"mlflow.parentRunId": self.parent, "kvbench.run": self.run_id,
                                         "kvbench.role": "config", "kvbench.key_hash": key_hash(row["key"])})

        @rule()
        def the_server_goes_away_or_comes_back(self):
            self.server_up = not self.server_up

        @precondition(lambda self: self.server_up)
        @rule()
        def kvbench_sync(self):
            sync(self.run, uri, root=root)

        @invariant()
        def every_row_once_on_disk(self):
            lines = self.run.results.read_text().splitlines() if self.run.results.exists() else []
            per_key = collections.Counter(json.loads(line)["key"] for line in lines)
            assert all(n == 1 for n in per_key.values())

        @invariant()
        def never_two_finished_children(self):
            for runs in all_children(cl, exp, self.run_id).values():
                assert sum(r.info.status == "FINISHED" for r in runs) <= 1

        def teardown(self):
            sync(self.run, uri, root=root)
            children = all_children(cl, exp, self.run_id)
            done = self.run.done_keys()
            assert {key_hash(k) for k in done} == set(children)
            assert all(len(v) == 1 and v[0].info.status == "FINISHED" for v in children.values())

    Machine.TestCase.settings = settings(max_examples=6, stateful_step_count=12, deadline=None)
    Machine.TestCase().runTest()
