"""KVManager on the worked examples of DESIGN.md section 1, plus its error paths."""

from __future__ import annotations

import numpy as np
import pytest

from mini_engine.errors import ConfigError, InvariantViolation
from mini_engine.memory.audit.record import Auditor
from mini_engine.memory.config import MemoryConfig
from mini_engine.memory.manager import KVManager
from mini_engine.memory.rules import MemoryRules
from mini_engine.memory.sizing import dflash_reserve, eagle_reserve, row_width


def make(policy="aligned", free_policy="floor", ps=16, num_pages=64, reserve=256, **kw):
    mem = MemoryConfig(ps, num_pages, 4, row_width(400, reserve, ps, True), policy=policy,
                       free_policy=free_policy, **kw)
    aud = Auditor("record")
    return KVManager(mem, aud), aud


def prefilled(m, committed=37):
    s = m.admit("r0")
    assert m.extend(s, committed)
    m.commit(s, committed)
    return s


def test_dflash_unaligned_strands_and_leaks_one_page_under_floor():
    m, aud = make("unaligned")
    s = prefilled(m)
    held_before = m.pages_held
    assert m.prepare([s], dflash_reserve(16))
    assert s.allocated == 69
    assert m.pages_held - held_before == 2 and m.pages_held * 16 == 80
    assert m.stranded_slots == 11 and m.reserved_unwritten_slots == 32
    assert m.stranded_by_writer == {"prefill": 0, "decode": 11, "spec": 0, "pd": 0}
    assert m.check(1) == []  # stranded by an exact writer: capacity lost while it runs, no breach
    free_before = m.num_free_pages
    m.release(s)
    assert m.num_free_pages - free_before == 4  # 69 // 16 pages by stride
    assert m.leaked_pages() == 1
    assert [v.id for v in m.check(2)] == ["K8"]
    assert aud.counts == {"K8": 1} and m.syncs == 0


def test_dflash_unaligned_under_dedup_drifts_but_does_not_leak():
    m, aud = make("unaligned", "dedup")
    s = prefilled(m)
    assert m.prepare([s], 32) and m.stranded_slots == 11
    m.release(s)
    assert m.leaked_pages() == 0 and m.syncs == 1
    m.check(1)
    assert aud.counts == {}


@pytest.mark.parametrize("free_policy", ["floor", "dedup"])
def test_dflash_aligned_worked_example(free_policy):
    m, aud = make("aligned", free_policy)
    s = prefilled(m)
    assert s.allocated == 48  # prefill records ceil_ps(37)
    assert m.prepare([s], 32) and s.allocated == 80 and m.stranded_slots == 0
    m.commit(s, 5)  # committed 42
    held = m.pages_held
    assert m.prepare([s], 32) and s.allocated == 80 and m.pages_held == held
    m.commit(s, 19)  # committed 61
    assert m.prepare([s], 32) and s.allocated == 96 and m.pages_held == held + 1
    assert m.check(1) == []
    m.release(s)
    assert m.leaked_pages() == 0 and m.num_free_pages == m.total_pages
    assert m.check(2) == [] and aud.total == 0


def test_eagle_chain_worked_example():
    reserve = eagle_reserve(16, 1, 3, 4)
    m, _ = make("unaligned")
    s = prefilled(m)
    assert m.prepare([s], reserve) and s.allocated == 45 and m.stranded_slots == 3
    m, _ = make("aligned")
    s = prefilled(m)
    assert m.prepare([s], reserve) and s.allocated == 48 and m.stranded_slots == 0


def test_eagle_tree_worked_example():
    m, aud = make("aligned")
    s = prefilled(m)
    assert m.prepare([s], eagle_reserve(16, 4, 3, 8)) and s.allocated == 304
    assert m.pages_held == 19 and m.check(1) == []


def test_prepare_is_all_or_nothing_for_the_batch():
    m, _ = make("aligned", num_pages=7)
    a, b = m.admit("a"), m.admit("b")
    assert m.extend(a, 30) and m.extend(b, 30)  # 2 pages each, 3 free
    m.commit(a, 30)
    m.commit(b, 30)
    free, ext = m.num_free_pages, (a.allocated, b.allocated)
    assert not m.prepare([a, b], 32)  # ceil_ps(62) = 64: 2 more pages each, 4 > 3
    assert m.num_free_pages == free and (a.allocated, b.allocated) == ext
    assert m.prepare([a], 32)


def test_extend_short_pool_changes_nothing():
    m, _ = make(num_pages=2)
    s = m.admit("r")
    assert not m.extend(s, 40)
    assert s.allocated == 0 and m.num_free_pages == 2 and m.pages_held == 0


def test_commit_past_the_extent_is_k3():
    m, aud = make()
    s = prefilled(m, 10)
    m.commit(s, 100)
    assert aud.counts == {"K3": 1} and s.committed == s.allocated == 16


def test_k4_when_the_row_has_no_headroom():
    # A profile that cuts at the row's end (row_overflow off: kvbench's own designs).
    mem = MemoryConfig(16, 64, 2, 64, rules=MemoryRules(row_overflow=False))
    aud = Auditor("record")
    m = KVManager(mem, aud)
    s = m.admit(0)
    m.extend(s, 40)
    m.commit(s, 40)
    m.prepare([s], 32)
    assert aud.counts.get("K4") == 1 and s.allocated == 64
    m.check(0)
    assert aud.counts == {"K4": 1}  # counted once, at the prepare, not again by the state check


def test_raise_mode_stops_at_the_first_violation():
    mem = MemoryConfig(16, 64, 2, 400, policy="unaligned")
    m = KVManager(mem, Auditor("raise"))
    s = m.admit(0)
    m.extend(s, 37)
    assert m.check(0) == []  # an exact writer's stranded tail is not a K1 breach
    with pytest.raises(InvariantViolation, match="K3"):
        m.commit(s, 38)


def test_admit_runs_out_of_rows_and_rows_come_back():
    m, _ = make()
    states = [m.admit(i) for i in range(4)]
    assert m.admit(9) is None
    m.release(states[2])
    assert m.admit(9).row == states[2].row


def test_slots_are_what_the_forward_writes():
    m, _ = make(ps=4)
    s = prefilled(m, 6)
    sl = m.slots(s, 0, 6)
    assert (sl % 4 == [0, 1, 2, 3, 0, 1]).all() and (sl >= 4).all()
    with pytest.raises(ValueError):
        m.slots(s, 0, 100)


def test_row_too_narrow_is_a_config_error():
    m, _ = make()
    s = m.admit(0)
    with pytest.raises(ConfigError, match="row_width"):
        m.extend(s, 10_000)


@pytest.mark.parametrize("field, value", [
    ("page_size", 0), ("num_pages", -1), ("max_reqs", 0), ("row_width", 0),
    ("policy", "round"), ("free_policy", "lazy"), ("swa_num_pages", 0), ("window", 0),
])
def test_memory_config_validation_names_the_field(field, value):
    kw = dict(page_size=16, num_pages=8, max_reqs=2, row_width=64, swa_num_pages=8, window=32)
    kw[field] = value
    with pytest.raises(ConfigError, match=f"^{field} must be"):
        MemoryConfig(**kw).validate()


def test_swa_needs_both_pool_and_window():
    with pytest.raises(ConfigError, match="swa_num_pages and window"):
        MemoryConfig(16, 8, 2, 64, swa_num_pages=8).validate()


def test_k8_catches_a_page_held_twice():
    m, aud = make()
    a, b = prefilled(m, 20), m.admit("b")
    assert m.extend(b, 20)
    page = int(m.ledger.pages_of("full", a.row)[0])
    m.ledger.take("full", np.array([b.row]), np.array([page]))  # a second owner for one page
    found = [v for v in m.check(0) if v.id == "K8"]
    assert found and found[0].values["held_twice"] == 1


def test_a_stale_state_cannot_release_the_request_that_reuses_its_row():
    m, aud = make()
    old = prefilled(m, 20)
    m.release(old)
    new = prefilled(m, 20)
    assert new.row == old.row
    held, free = m.pages_held, m.num_free_pages
    with pytest.raises(ValueError, match="not live"):
        m.release(old)
    assert m.states[new.row] is new and (m.pages_held, m.num_free_pages) == (held, free)
    assert m.num_free_rows == 3 and m.check(0) == []
