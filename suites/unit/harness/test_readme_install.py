"""The README's first two commands (install and run; install and test) are what a newcomer
pastes on a fresh Linux machine: torch must come from PyTorch's CPU index there (PyPI's is
the multi-GB CUDA build), and only torch: the package comes from PyPI, so a CPU index that
is slow or unreachable cannot stall the rest of the install."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CPU_TORCH = "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"


def first_commands(n: int = 2) -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    return [b.strip() for b in blocks[:n]]


def test_the_first_two_commands_take_the_cpu_wheel_and_only_for_torch():
    commands = first_commands()
    assert len(commands) == 2
    for command in commands:
        assert "\n" not in command  # one line, pasted as is
        steps = [s.strip() for s in command.split("&&")]
        assert steps[:2] == ["python3 -m venv .venv", ". .venv/bin/activate"]  # a fresh machine
        assert steps[2] == CPU_TORCH  # before the package, which then finds torch installed
        assert steps[3].startswith("pip install -e '.[") and "index" not in steps[3]
    assert commands[0].endswith("kvbench sweep smoke") and commands[1].endswith("python -m pytest -n 2")
