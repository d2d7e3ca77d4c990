"""scripts/measure_speed.py refuses a bound it cannot meet and flags that contradict each
other in one line, exit 2, before any work (R13: --rounds 1000000000 ran until killed;
--walls --pytest --no-pytest was accepted, one of the two silently won)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "measure_speed.py"


@pytest.mark.parametrize("argv, words", [
    (["--rounds", "1000000000"], "--rounds takes a whole number from 1 to 20, not 1000000000"),
    (["--rounds", "0"], "--rounds takes a whole number from 1 to 20, not 0"),
    (["--walls", "--pytest", "--no-pytest"], "--pytest and --no-pytest contradict each other"),
    (["--no-pytest"], "--no-pytest applies to --walls only"),
])
def test_measure_speed_refuses_bad_flags_before_any_work(tmp_path, argv, words):
    proc = subprocess.run([sys.executable, str(SCRIPT), *argv], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    err = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and not proc.stdout and len(err) == 1, proc.stderr
    assert err[0].startswith(f"measure_speed: error: {words}"), err
