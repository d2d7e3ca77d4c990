"""The accounting profiles on worked numbers read from SGLang 0.5.23's own code.

Release: ``release_kv_cache`` frees the row's segment ``[protected, owned)`` with
``free_kv_row`` (a paged free returns every page any freed slot lies on) and
``_release_overallocated_kv_indices`` frees ``[ceil_ps(owned), allocated)``: every
page the extent touches comes back, in both pools. SWA eviction:
``ScheduleBatch.maybe_evict_swa`` / ``free_swa_out_of_window_slots``. PD tail:
``disaggregation/decode.py`` ``_swa_tail_len`` (tail path only when ps > 1).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mini_engine.errors import ConfigError
from mini_engine.memory.audit.record import Auditor
from mini_engine.memory.config import MemoryConfig
from mini_engine.memory.manager import KVManager
from mini_engine.memory.rules import ALIGN_NAMES, BASE_WRITERS, WRITER_KINDS
from mini_engine.memory.sizing import pd_swa_tail_len, swa_evict_target
from mini_engine.config.profiles import PROFILES, resolve


def make(profile: str, ps: int = 16, window: int | None = None, num_pages: int = 256, **knobs):
    mem = MemoryConfig(ps, num_pages, 4, 4096, swa_num_pages=num_pages if window else None, window=window,
                       algo="dflash", rules=resolve(profile, **knobs).memory_rules())
    aud = Auditor("record")
    return KVManager(mem, aud), aud


def dflash_request(m, prompt=37, reserve=32):
    s = m.admit("r0")
    assert m.extend(s, prompt)
    m.commit(s, prompt)
    assert m.prepare([s], reserve)
    return s


@pytest.mark.parametrize("ps, extent, stranded", [(16, 69, 11), (64, 69, 59)])
def test_pre_35265_dflash_strands_at_the_spec_step_and_leaks_nothing(ps, extent, stranded):
    m, aud = make("sglang-pre-35265", ps, window=32)
    s = dflash_request(m)
    assert s.allocated == extent and s.writer == "spec" and not s.aligned
    assert m.stranded_by_writer["spec"] == stranded
    full_free, swa_free = m.num_free_pages, m.swa.allocator.num_free_pages
    m.release(s)
    # Every page the extent touches comes back, in both pools: 0 leaked.
    assert m.num_free_pages - full_free == -(-extent // ps)
    assert m.swa.allocator.num_free_pages - swa_free == -(-extent // ps)
    assert m.leaked_pages() == 0 and m.check(1) == [] and aud.counts == {}


def test_0_5_23_aligns_the_dflash_reservation_and_records_the_prefill_exactly():
    m, _ = make("sglang-0.5.23")
    s = m.admit(0)
    assert m.extend(s, 37) and s.allocated == 37 and m.stranded_by_writer["prefill"] == 11
    m.commit(s, 37)
    assert m.prepare([s], 32) and s.allocated == 80 and s.aligned
    assert m.stranded_by_writer == {"prefill": 0, "decode": 0, "spec": 0, "pd": 0}


def test_floor_free_loses_the_last_partial_page_in_both_pools():
    m, aud = make("floor-free", 16, window=32)
    s = dflash_request(m)  # extent 69
    m.release(s)
    assert m.leaked_pages("full") == 1 and m.leaked_pages("swa") == 1
    assert [v.id for v in m.check(1)] == ["K8", "K8"]


def test_host_aligned_strands_nothing():
    m, aud = make("host-aligned")
    s = m.admit(0)
    assert m.extend(s, 37) and s.allocated == 48
    m.commit(s, 37)
    assert m.prepare([s], 32) and s.allocated == 80 and m.stranded_slots == 0
    m.release(s)
    assert m.leaked_pages() == 0 and m.check(1) == []


@settings(max_examples=60, deadline=None)
@given(ps=st.integers(1, 256), lens=st.lists(st.integers(1, 700), min_size=1, max_size=4),
       profile=st.sampled_from(sorted(PROFILES)))
def test_unaligned_release_returns_every_page_except_under_floor_free(ps, lens, profile):
    """At every page size, an exact extent's release returns every page under the SGLang
    profiles; only floor-free leaks, exactly one page per request whose extent is unaligned."""
    m, _ = make(profile, ps, num_pages=4096 // ps + 8, policy=None)
    states = []
    for i, n in enumerate(lens):
        s = m.admit(i)
        assert m.extend(s, n)
        m.commit(s, n)
        states.append(s)
    extents = [s.allocated for s in states]
    for s in states:
        m.release(s)
    predicted = sum(e % ps != 0 for e in extents) if m.rules.free == "floor" else 0
    assert m.leaked_pages() == predicted
    if profile in ("sglang-0.5.23", "sglang-pre-35265"):
        assert predicted == 0


# -- SWA eviction: free_swa_out_of_window_slots ------------------------------------------

@pytest.mark.parametrize("pre_len, cursor, interval, cache, want", [
    (165, 0, 128, "radix", 128),   # 165 - 32 >= 0 + 128: evict to floor16(165 - 32) = 128
    (157, 0, 128, "radix", 0),     # 125 < 128: not yet
    (165, 0, 128, "chunk", 128),   # chunk: floor16(165 - 32) = 128 as well
    (170, 0, 1, "chunk", 128),     # floor16(138)
    (170, 0, 1, "radix", 128),     # floor16(170 - 32)
    (60, 0, 1, "radix", 16),       # floor16(28)
    (60, 16, 1, "radix", 16),      # never back, nothing new
])
def test_swa_evict_target_window_32_ps_16(pre_len, cursor, interval, cache, want):
    assert swa_evict_target(pre_len, cursor, 32, 16, interval, cache) == want


def test_radix_threshold_keeps_a_whole_page_when_the_window_is_smaller():
    # window 10, ps 16: radix keeps ceil16(max(10, 16)) = 16 positions, chunk keeps 10.
    assert swa_evict_target(50, 0, 10, 16, 1, "radix") == 32  # floor16(50 - 16)
    assert swa_evict_target(50, 0, 10, 16, 1, "chunk") == 32  # floor16(40)
    assert swa_evict_target(45, 0, 10, 16, 1, "radix") == 16  # floor16(29)
    assert swa_evict_target(45, 0, 10, 16, 1, "chunk") == 32  # floor16(35)


# -- PD prealloc: _swa_tail_len ------------------------------------------------------------

def test_pd_ps1_has_no_tail_prealloc():
    m, aud = make("sglang-0.5.23", ps=1, window=32)
    s = m.admit(0)
    assert m.pd_prealloc(s, 50)
    assert s.swa_evicted == 0 and m.swa_pages_held == 50 and s.allocated == 50
    assert pd_swa_tail_len(50, 32, 1) == 50


def test_pd_records_the_exact_fill_and_the_tail_at_ps16():
    m, _ = make("sglang-0.5.23", ps=16, window=32)
    s = m.admit(0)
    assert m.pd_prealloc(s, 50)
    assert s.allocated == 50 and s.swa_evicted == 16 and m.swa_pages_held == 3  # tail 34
    assert m.stranded_by_writer["pd"] == 14


def test_pd_radix_tail():
    assert pd_swa_tail_len(64, 32, 16, radix=True) == 48  # 64 - floor16(64 - 1 - 32)
    assert pd_swa_tail_len(64, 32, 16, radix=False) == 32
    m, _ = make("sglang-0.5.23", ps=16, window=32, pd_radix=True)
    s = m.admit(0)
    assert m.pd_prealloc(s, 64) and s.swa_evicted == 16


# -- profiles and their knobs --------------------------------------------------------------

@pytest.mark.parametrize("name, knobs, message", [
    ("floor-free", {"free": "segment"}, "free contradicts profile floor-free"),
    ("host-aligned", {"align": "eagle"}, "align contradicts profile host-aligned"),
    ("host-aligned", {"policy": "unaligned"}, "align contradicts profile host-aligned"),
    ("sglang-0.5.23", {"policy": "aligned", "align": "all"}, "policy and align"),
    ("sglang-0.5.23", {"align": "prefill"}, "align must be all, none or a comma list"),
    ("nightly", {}, "profile must be one of"),
    ("sglang-0.5.23", {"swa_ratio": 1.5}, "swa_ratio must be a number in"),
])
def test_contradictions_are_one_line(name, knobs, message):
    with pytest.raises(ConfigError, match=message):
        resolve(name, **knobs)


def test_profiles_say_what_they_are():
    p = PROFILES
    assert p["sglang-0.5.23"].align == {"eagle", "dflash"} and p["sglang-0.5.23"].free == "segment"
    assert p["sglang-pre-35265"].align == {"eagle"}
    assert p["host-aligned"].all_aligned and p["host-aligned"].row_headroom == "generous"
    assert p["floor-free"].what_if and p["floor-free"].free == "floor"
    assert [n for n, q in p.items() if q.what_if] == ["floor-free"]
    assert resolve("sglang-0.5.23", swa_eviction_interval=1, prefix_cache="chunk").swa_eviction_interval == 1


@settings(max_examples=40, deadline=None)
@given(ps=st.sampled_from([1, 2, 16, 64, 256]), reqs=st.lists(st.tuples(st.integers(1, 900), st.integers(0, 64)),
                                                          min_size=1, max_size=4),
       reserve=st.integers(1, 64))
def test_aligned_reservation_equals_sglang_side_by_side(ps, reqs, reserve):
    """The page-aligned reservation of sglang-0.5.23 against SGLang's own
    page_aligned_decode_alloc_lens on the same lengths (skipped where SGLang is absent)."""
    sizing = pytest.importorskip("sglang.srt.mem_cache.allocation_sizing")
    from types import SimpleNamespace

    m, _ = make("sglang-0.5.23", ps, num_pages=8192 // ps + 64)
    states, fakes = [], []
    for i, (committed, ahead) in enumerate(reqs):
        s = m.admit(i)
        assert m.extend(s, committed + ahead)
        m.commit(s, committed)
        states.append(s)
        fakes.append(SimpleNamespace(kv=SimpleNamespace(kv_allocated_len=s.allocated, kv_committed_len=committed)))
    cur, nxt, need = sizing.page_aligned_decode_alloc_lens(fakes, reserve=reserve, page_size=ps)
    assert m.prepare(states, reserve, algo="dflash")
    assert [s.allocated for s in states] == nxt
    assert sum(n - c for n, c in zip(nxt, cur)) == need


def test_the_align_knob_and_the_counters_name_one_set_of_writers():
    # "extend" (the knob, SGLang's alloc_extend) and "prefill" (the counters) are one
    # writer: every kind but "spec" (aligned per algorithm) has exactly one knob name.
    assert set(ALIGN_NAMES) == set(WRITER_KINDS) - {"spec"}
    assert BASE_WRITERS == tuple(ALIGN_NAMES[k] for k in WRITER_KINDS if k != "spec") == ("extend", "decode", "pd")
