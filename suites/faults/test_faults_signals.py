"""A sweep stopped by a signal: what it finished is kept, what it had in flight is left
for --resume, never recorded as a failure."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from faultkit import finish, start


def rows_of(run: Path) -> list[dict]:
    path = run / "results.jsonl"
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _own_group_ignoring_sigint() -> None:
    # A script's background job: its own process group, SIGINT ignored from the start
    # (what a non-interactive shell gives `cmd &`); the Ctrl-C is sent to the group.
    os.setsid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_a_ctrl_c_leaves_the_config_in_flight_for_resume(results_root, tiny, cli, capsys):
    """SIGINT to the sweep's process group once its first row landed: the sweep went on
    ignoring it while its worker stopped, then recorded the config in flight as 'the
    worker running this config died', which --resume never reran. It must stop as on a
    SIGTERM: exit 130, no failed row, and --resume finishes every config."""
    bigger = tiny.with_name("bigger.toml")
    seeds = ", ".join(str(i) for i in range(1, 13))
    bigger.write_text(tiny.read_text().replace("page_size = [1, 16]", f"page_size = [1, 16]\nseed = [{seeds}]"))
    run = results_root / "runs" / "ctrlc"
    proc = start(results_root, "sweep", bigger, "--no-mlflow", "--run-id", "ctrlc", "-j", "1",
                 preexec_fn=_own_group_ignoring_sigint)
    # Waits for the first landed row, not a fixed time (a loaded machine starts slowly).
    while not rows_of(run) and proc.poll() is None:
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGINT)
    rc, _, err = finish(proc)
    assert rc == 130, err
    assert "kvbench: interrupted; finish it with kvbench sweep" in err and "--resume ctrlc" in " ".join(err.split())
    kept = rows_of(run)
    assert kept and all(r["status"] == "ok" for r in kept), [r.get("error") for r in kept]
    assert cli("sweep", bigger, "--no-mlflow", "--resume", "ctrlc", "-j", "1") == 0
    rows = rows_of(run)
    assert len(rows) == 24 and len({r["key"] for r in rows}) == 24
    assert all(r["status"] == "ok" for r in rows)
    assert rows[:len(kept)] == kept  # nothing finished before the Ctrl-C lost or redone
