"""SGLang for the conformance tests: skipped with the reason where it is not importable.

CI installs it (docs/conform.md) and sets KVBENCH_REQUIRE_SGLANG=1, which turns the
skip into a failure, so a broken install cannot pass as a green run of skips.
"""

from __future__ import annotations

import os

import pytest

from harness.conform import SGLangMissing, load_sglang


@pytest.fixture(scope="session")
def sg():
    try:
        return load_sglang()
    except SGLangMissing as err:
        if os.environ.get("KVBENCH_REQUIRE_SGLANG") == "1":
            pytest.fail(f"KVBENCH_REQUIRE_SGLANG=1 but {err}")
        pytest.skip(str(err))
