"""SGLang's code a replay needs and cannot import is one error class (SGLangMissing), for
the allocator's modules and for UnifiedRadixCache's serving stack alike: one line, exit 2."""

from __future__ import annotations

import pytest

from harness.conform import swa_tree
from harness.conform.versions import SGLangMissing
from harness.core.errors import HarnessError


def test_a_serving_stack_that_does_not_import_is_sglang_missing(monkeypatch):
    def broken():
        raise ImportError("No module named 'sglang.srt.mem_cache.unified_radix_cache'")

    swa_tree.sglang_swa.cache_clear()
    monkeypatch.setattr(swa_tree.sglang_swa_radix, "load", broken)
    try:
        with pytest.raises(SGLangMissing) as err:
            swa_tree.unified_tree("swa_ tree records")
    finally:
        swa_tree.sglang_swa.cache_clear()  # the next caller loads the real stack
    assert isinstance(err.value, HarnessError)
    text = str(err.value)
    assert text.startswith("the trace has swa_ tree records and SGLang's UnifiedRadixCache does not import here")
    assert "No module named" in text and "\n" not in text
