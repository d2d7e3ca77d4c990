"""tox.ini reads PyTorch's CPU index for torch alone: an index given to every install
(install_command) stalled each of them for 15 minutes where the index was unreachable,
and the package with its other dependencies comes from PyPI anyway."""

from __future__ import annotations

import configparser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def test_only_the_torch_install_reads_the_cpu_index():
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(ROOT / "tox.ini")
    for name in ini.sections():
        # No install command of any env names an index: the package's install stays on PyPI.
        assert "index" not in ini[name].get("install_command", ""), name
    deps = [line.strip() for line in ini["testenv"]["deps"].splitlines() if line.strip()]
    # tox 4 installs deps in their own pip call before the package: the index reaches torch only.
    assert deps == [f"--index-url {CPU_INDEX}", "torch==2.13.0"]
    assert CPU_INDEX not in ini["testenv:gpu"]["deps"]  # the GPU env takes PyPI's CUDA build
