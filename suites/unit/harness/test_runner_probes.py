"""Memory probes are the harness's: run_config measures the RSS peak around the
engine's construction and run; the engine itself reads no /proc."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from harness import ROOT

from harness.run.runner import run_config

OPTIONS = dict(workload="fixed", num_requests=1, input_len=3, output_len=4, pool_tokens=4096)


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="per-run RSS peak needs Linux")
def test_rss_peak_is_the_runs_own():
    import numpy as np

    from harness.run.hardware import rss_peak_bytes

    big = np.ones(256 * 2**20 // 8)  # 256 MiB, touched, then freed before the run
    earlier = rss_peak_bytes()
    del big
    row = run_config(OPTIONS)
    assert row["status"] == "ok"
    assert 0 < row["metrics"]["rss_peak_bytes"] < earlier - 128 * 2**20


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="per-run RSS peak needs Linux")
def test_rss_peak_counts_the_engines_pools():
    # A pool of 2**26 tokens at ps 1: host arrays the run touches (the free list, its marks), tens
    # of MiB; the peak sees them. In a fresh process: a test worker that ran others first may
    # hand the big run memory that is already resident, which no RSS peak can see.
    code = ("import json; from harness.run.runner import run_config; o = json.loads(%r); "
            "s = run_config(o)['metrics']['rss_peak_bytes']; "
            "b = run_config(dict(o, pool_tokens=1 << 26))['metrics']['rss_peak_bytes']; print(s, b)"
            % json.dumps(OPTIONS))
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    small, big = map(int, out.stdout.split()[-2:])
    assert big > small + 32 * 2**20


def test_the_engine_reports_no_process_figure():
    from mini_engine.config.engine_config import EngineConfig
    from mini_engine.engine import Engine
    from mini_engine.request import Request

    result = Engine(EngineConfig(pool_tokens=4096)).run([Request(rid=0, prompt=[1, 2, 3], max_new_tokens=4)])
    assert "rss_peak_bytes" not in result.stats
    assert result.stats["output_tokens"] == 4
