"""SGLang for the conformance tests: skipped with the reason where it is not importable.

CI installs it (docs/conform.md) and sets KVBENCH_REQUIRE_SGLANG=1, which turns the
skip into a failure, so a broken install cannot pass as a green run of skips.

The 0.5.18 tests (the pre-35265 profile's release) take ``sg0518``: they skip unless
SGLang 0.5.18 is the one installed. CI runs them in its second venv, which has 0.5.18,
with KVBENCH_REQUIRE_SGLANG=0.5.18, which turns that skip into a failure too (and an
unimportable SGLang fails ``sg`` as well: the release-neutral files run there too).
"""

from __future__ import annotations

import os

import pytest

from harness.conform.check import load_sglang
from harness.conform.versions import SGLangMissing
from harness.conform.swa_tree import sglang_swa
from harness.reference import loader


@pytest.fixture(scope="session")
def sg():
    try:
        return load_sglang()
    except SGLangMissing as err:
        required = os.environ.get("KVBENCH_REQUIRE_SGLANG")
        if required:  # "1", or the release CI's second venv holds ("0.5.18")
            pytest.fail(f"KVBENCH_REQUIRE_SGLANG={required} but {err}")
        pytest.skip(str(err))


@pytest.fixture(scope="session")
def sg_serving(sg):
    """SGLang's serving stack (UnifiedRadixCache and its kin: harness/conform/sglang_swa_radix.py),
    loaded once through conform's own cached loader; a skip where it does not import,
    a failure under any KVBENCH_REQUIRE_SGLANG (0.5.18's venv included)."""
    try:
        return sglang_swa()
    except Exception as err:  # an ImportError, or a dependency failing at import time
        required = os.environ.get("KVBENCH_REQUIRE_SGLANG")
        if required:
            pytest.fail(f"KVBENCH_REQUIRE_SGLANG={required} but SGLang's UnifiedRadixCache does not load: {err}")
        pytest.skip(f"SGLang's UnifiedRadixCache does not load on this machine: {err}")


@pytest.fixture(scope="module")
def reference(sg_serving):
    """The reference engine's SGLang (harness/reference/loader.py): a skip where it cannot
    drive the installed release, a failure under KVBENCH_REQUIRE_SGLANG."""
    try:
        return loader.load()
    except loader.ReferenceUnavailable as err:
        if os.environ.get("KVBENCH_REQUIRE_SGLANG"):
            pytest.fail(f"KVBENCH_REQUIRE_SGLANG is set but {err}")
        pytest.skip(str(err))


@pytest.fixture(scope="session")
def sg0518():
    """SGLang 0.5.18, the last release before PR 35265 (the pre-35265 profile's release)."""
    required = os.environ.get("KVBENCH_REQUIRE_SGLANG") == "0.5.18"
    try:
        sg = load_sglang()
    except SGLangMissing as err:
        if required:
            pytest.fail(f"KVBENCH_REQUIRE_SGLANG=0.5.18 but {err}")
        pytest.skip(str(err))
    if sg.version != "0.5.18":
        why = (f"needs SGLang 0.5.18 (installed: {sg.version}); CI runs it in its 0.5.18 venv "
               "(docs/conform.md)")
        if required:
            pytest.fail(f"KVBENCH_REQUIRE_SGLANG=0.5.18 but it {why}")
        pytest.skip(why)
    return sg
