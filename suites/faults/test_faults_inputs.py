"""An input file option given a FIFO, a device or a directory is one line and exit 2,
never a block (L11): open() of a FIFO with no writer waits for ever, /dev/zero never ends."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# (argv with {} for the path): every option kvbench reads a user-named file from.
COMMANDS = {
    "--config": ["run", "--config", "{}"],
    "--prompts": ["run", "--prompts", "{}"],
    "--event": ["bot", "handle", "--event", "{}", "--root", str(ROOT)],  # the repository's registries, read only
    "--body-file": ["bot", "report", "--comment-id", "1", "--group", "1", "--status", "passed", "--dry-run",
                    "--body-file", "{}"],
}


def _special(tmp_path, kind: str) -> str:
    if kind == "fifo":
        path = tmp_path / "fifo"
        os.mkfifo(path)
        return str(path)
    if kind == "directory":
        (tmp_path / "dir").mkdir()
        return str(tmp_path / "dir")
    return "/dev/zero"


@pytest.mark.parametrize("kind, says", [("fifo", "a FIFO"), ("directory", "a directory"),
                                        ("device", "a character device")])
@pytest.mark.parametrize("option", sorted(COMMANDS))
def test_a_special_file_as_input_is_one_line_not_a_block(tmp_path, option, kind, says):
    path = _special(tmp_path, kind)
    argv = [a.replace("{}", path) for a in COMMANDS[option]]
    env = {**os.environ, "KVBENCH_RESULTS": str(tmp_path / "results")}
    try:
        proc = subprocess.run([sys.executable, "-c", "import sys; from harness.cli import main; sys.exit(main(sys.argv[1:]))",
                               *argv], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{option} {kind}: blocked")
    err = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(err) == 1, proc.stderr
    assert option.lstrip("-").split("-")[0] in err[0] and says in err[0], err
