"""kvbench's SWA eviction rule against SGLang 0.5.23's own ``free_swa_out_of_window_slots``.

That function's module imports torchvision at load time, so its source is read from
the installed package and only that function (and the two integer helpers it calls)
is compiled: the numbers come from SGLang's code, not from a copy in kvbench. The
decode trigger (``ScheduleBatch._swa_eviction_trigger``) is the same gate with the
eviction interval: ``seqlen - 1 - window >= cursor + interval``, with pre_len =
seqlen - 1.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mini_engine.memory.sizing import swa_evict_target
from sglang_source import functions


@pytest.fixture(scope="module")
def sglang_evict(sg):  # sg: the installed SGLang, or a skip (a failure under KVBENCH_REQUIRE_SGLANG=1)
    from sglang.srt.mem_cache.unified_cache.component_type import ComponentType

    ns = functions("sglang.srt.utils.common", {"ceil_div", "ceil_align"}, {})
    ns = functions("sglang.srt.mem_cache.common", {"free_swa_out_of_window_slots"},
                    {"ComponentType": ComponentType, "ceil_align": ns["ceil_align"],
                     "Callable": object, "Optional": object, "Req": object, "ReqToTokenPool": object,
                     "BaseTokenToKVPoolAllocator": object})
    fn = ns["free_swa_out_of_window_slots"]

    def evict(pre_len: int, cursor: int, window: int, ps: int, interval: int, prefix_sharing: bool) -> int:
        state = {"evicted": cursor}
        kv = SimpleNamespace(holds_kv=True, cache_protected_len=0, req_pool_idx=0,
                             get_evicted_seqlen=lambda c: state["evicted"], swa_dead_lo=lambda p: 0,
                             set_evicted_seqlen=lambda c, v: state.update(evicted=v))
        pool = SimpleNamespace(req_to_token=np.arange(pre_len + 1)[None, :])
        fn(SimpleNamespace(kv=kv), pre_len, sliding_window_size=window, page_size=ps, req_to_token_pool=pool,
           token_to_kv_pool_allocator=None, supports_prefix_sharing=prefix_sharing,
           free_segment=lambda slots, start_pos: None, eviction_interval=interval)
        return state["evicted"]

    return evict


@given(pre_len=st.integers(0, 2000), cursor_pages=st.integers(0, 60), window=st.integers(1, 300),
       ps=st.sampled_from([1, 2, 16, 64, 256]), interval=st.sampled_from([1, 16, 128]),
       cache=st.sampled_from(["radix", "chunk"]))
def test_swa_cursor_equals_sglangs(sglang_evict, pre_len, cursor_pages, window, ps, interval, cache):
    cursor = min(cursor_pages * ps, pre_len // ps * ps)
    want = sglang_evict(pre_len, cursor, window, ps, interval, prefix_sharing=cache == "radix")
    assert swa_evict_target(pre_len, cursor, window, ps, interval, cache) == want


def test_the_worked_example_reads_the_same_in_sglang(sglang_evict):
    # DFLASH block 16, ps 16, window 32, interval 128: committed 165 at decode step 16.
    assert sglang_evict(164, 0, 32, 16, 128, prefix_sharing=True) == 128
    assert sglang_evict(156, 0, 32, 16, 128, prefix_sharing=True) == 0  # one step earlier: not yet due
