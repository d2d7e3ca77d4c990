"""Shared pytest set-up for every suite.

Triton reads TRITON_INTERPRET when a kernel is defined, so it is set here, before
any test module imports the kernels, on machines without a CUDA device.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # GPU tests are skipped, not failed, where no GPU is visible (e.g. `-m gpu` on a laptop).
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
