"""A skip raised by one shared fixture is one line of the -ra summary, not one per test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
REASON = "needs a thing that is not installed"


# In-process, and as the README runs the tests: xdist workers send the skips to the
# controller, whose summary must fold them the same way.
@pytest.mark.parametrize("dist", [["-p", "no:xdist"], ["-n", "2"]], ids=["no-xdist", "xdist"])
def test_one_summary_line_per_skip_reason(tmp_path, dist):
    (tmp_path / "conftest.py").write_text(
        "import pytest\n"
        "from harness.core.pytest_skips import pytest_terminal_summary\n"
        "@pytest.fixture(scope='session')\n"
        f"def thing():\n    pytest.skip({REASON!r})\n")
    for name in ("a", "b"):
        (tmp_path / f"test_{name}.py").write_text(
            "".join(f"def test_{name}{i}(thing):\n    pass\n\n" for i in range(3)))
    (tmp_path / "test_c.py").write_text("import pytest\ndef test_c():\n    pytest.skip('another reason')\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *dist, "-ra",
                          "-q", str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True).stdout
    lines = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    # Six tests in two files: one line at the folder they share (the rootdir, ".").
    assert [line for line in lines if REASON in line] == [f"SKIPPED [6] .: {REASON}"], out
    assert len([line for line in lines if "another reason" in line]) == 1, out  # a single place stays as it was
