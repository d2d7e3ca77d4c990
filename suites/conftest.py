"""Shared pytest set-up for every suite.

Triton reads TRITON_INTERPRET when a kernel is defined, so it is set here, before
any test module imports the kernels, on machines without a CUDA device. torch is
optional here: the memory layer's tests run where only numpy is installed
(.ci/run's numpy-only step), and the tests that need torch import it themselves.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# One summary line per skip reason (a shared fixture's skip otherwise prints once per test).
from harness.core.pytest_skips import pytest_terminal_summary  # noqa: F401  (a pytest hook)

try:  # the engine's torch extra; the accounting-only tests need numpy alone
    import torch
except ImportError:
    torch = None

try:  # the test extras; `kvbench sweep` runs the grid suite with the base install
    from hypothesis import settings
except ImportError:
    settings = None

if settings is not None:
    # Hypothesis' default per-example deadline is a wall-clock threshold: on a shared
    # machine it fails at random, so no profile here has one. KVBENCH_HYPOTHESIS=long
    # runs many more and longer random sequences (nightly, or by hand).
    settings.register_profile("default", max_examples=50, deadline=None)
    settings.register_profile("long", max_examples=1000, stateful_step_count=300, deadline=None)
    settings.load_profile(os.environ.get("KVBENCH_HYPOTHESIS", "default"))

CUDA = torch is not None and torch.cuda.is_available()

if torch is not None and not CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    # The test models' matmuls take microseconds; on a shared CPU (and with one xdist
    # worker per core) intra-op thread handoffs cost milliseconds each (measured 68 us
    # with one thread vs 15 ms with two for one tiny linear).
    # The count torch chose, for the benchmarks that compare against a library at its default.
    os.environ.setdefault("KVBENCH_DEFAULT_THREADS", str(torch.get_num_threads()))
    torch.set_num_threads(1)


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Before the first dot: what this machine will skip and why. Without SGLang the
    conformance tests (suites/unit/conform) come early in the run as a wall of "s" that
    read as a broken install; -ra lists them again at the end."""
    lines = []
    if importlib.util.find_spec("sglang") is None:
        lines.append("kvbench: SGLang is not installed, so the conformance tests (suites/unit/conform) skip as 's'; "
                     "docs/conform.md installs it")
    if not CUDA:
        lines.append("kvbench: no CUDA GPU, so the GPU tests skip (-m gpu on a CUDA machine)")
    return lines


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # GPU tests are skipped, not failed, where no GPU is visible (e.g. `-m gpu` on a laptop).
    if CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def results_root(tmp_path, monkeypatch: pytest.MonkeyPatch):
    """An isolated results root: KVBENCH_RESULTS points at it, and the caller's
    tracking URI does not leak in."""
    root = tmp_path / "results"
    root.mkdir()
    monkeypatch.setenv("KVBENCH_RESULTS", str(root))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("KVBENCH_PR", raising=False)  # a suite rerun's: would send sweeps to the PR experiment
    return root


@pytest.fixture
def cli():
    """The kvbench CLI in-process: cli("sweep", "smoke") -> exit code."""
    from harness.cli import main

    return lambda *argv: main([str(a) for a in argv])


@pytest.fixture
def parses():
    """The RunSpec.parse calls made while the fixture is active (a list of the configs
    parsed): a config is parsed once where it enters, and tests count that here."""
    from unittest import mock

    from harness.core.run_spec import RunSpec  # the engine's config: not every suite's install has it

    calls: list[dict] = []
    real = RunSpec.parse.__func__

    def counted(cls, config):
        calls.append(dict(config))
        return real(cls, config)

    with mock.patch.object(RunSpec, "parse", classmethod(counted)):
        yield calls


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """kvbench's wheel, built once a session (the install test and the per-role venvs
    share it), from a copy: a build writes build/ and *.egg-info beside the sources."""
    root = Path(__file__).resolve().parents[1]
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(root / name, src / name)
    for name in ("harness", "mini_engine", "suites"):
        shutil.copytree(root / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    # No build isolation: the build needs only setuptools, already here, and no network.
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out),
                    str(src)], check=True, capture_output=True)
    (whl,) = out.glob("kvbench-*.whl")
    return whl
