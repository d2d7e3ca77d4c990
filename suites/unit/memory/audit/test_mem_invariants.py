"""Auditor modes and the readable Violation; K2 at the single extent writer."""

from __future__ import annotations

import pytest

from mini_engine.errors import ConfigError, InvariantViolation
from mini_engine.memory.audit.record import Auditor, Violation
from mini_engine.memory.config import MemoryConfig
from mini_engine.memory.manager import KVManager


def test_violation_reads_as_one_line():
    v = Violation("K6", "r7", 12, {"value": 18, "page_size": 16})
    assert str(v) == "K6 violated at step 12 request r7: value=18, page_size=16"


def test_record_keeps_the_first_hundred_and_counts_all():
    a = Auditor("record")
    for i in range(150):
        a.report(Violation("K1" if i % 2 else "K8", i, i))
    assert a.total == 150 and a.counts == {"K8": 75, "K1": 75} and len(a.records) == 100
    assert a.records[0].rid == 0


def test_off_mode_counts_nothing_and_raise_mode_raises():
    off = Auditor("off")
    off.report(Violation("K1", 0, 0))
    assert off.total == 0 and off.counts == {}
    with pytest.raises(InvariantViolation) as err:
        Auditor("raise").report(Violation("K3", 1, 2, {"committed": 5}))
    assert err.value.violation.id == "K3" and "K3 violated at step 2" in str(err.value)


def test_bad_mode():
    with pytest.raises(ConfigError, match="audit mode must be one of record, raise, off"):
        Auditor("loud")


def test_extent_has_one_writer_that_never_goes_back():
    m = KVManager(MemoryConfig(16, 16, 2, 128), Auditor("raise"))
    s = m.admit("r")
    assert m.extend(s, 32) and s.allocated == 32
    assert m.extend(s, 16) and s.allocated == 32  # a shorter cover leaves the extent where it is
    assert m.prepare([s], 1) and s.allocated == 32  # committed 0 + 1 is inside the extent
    assert m.check(0) == []


def prefilled(n=40, **mem):
    """A manager (ps 16) with one request whose first n positions are committed."""
    m = KVManager(MemoryConfig(16, 16, 2, 128, **mem), Auditor("record"))
    s = m.admit(0)
    assert m.extend(s, n)
    m.commit(s, n)
    return m, s


def test_k2_state_check_sees_an_extent_moved_back_behind_the_writer():
    m, s = prefilled()
    assert m.check(0) == []
    s.allocated = 32  # a bypassing write: the state check must notice
    ids = [v.id for v in m.check(1)]
    assert "K2" in ids and "K1" in ids  # 3 pages held for an extent of 2


def test_k9_checks_the_bound_the_engine_plans_with(monkeypatch):
    from mini_engine.memory import sizing

    m, s = prefilled(draft_window=20)  # exact compact length 24: 20 + 4 positions of a page not yet freed
    assert m.check(0) == []
    # An envelope without the page of slack is below the exact length: K9 must say so.
    monkeypatch.setattr(sizing, "compact_draft_bound", lambda n, dw, ps: min(n, dw))
    found = m.check(1)
    assert [v.id for v in found] == ["K9"] and found[0].values["exact"] > found[0].values["bound"]


def test_k5_state_check_sees_a_corrupt_free_list():
    m, s = prefilled()
    held = m.ledger.pages_of("full", s.row)
    m.full._released.append(held[:1].copy())  # a held page also on the free list, behind the allocator
    assert "K5" in [v.id for v in m.check(0)]


def test_k5_state_check_sees_a_page_twice_on_the_free_list():
    m, _ = prefilled()
    m.full._released.append(m.full.free_page_ids()[:1].copy())  # a free page freed again, behind the allocator
    assert "K5" in [v.id for v in m.check(0)]


def test_k6_state_check_sees_a_cursor_written_behind_the_writer():
    mem = MemoryConfig(16, 16, 2, 128, swa_num_pages=16, window=16)
    m = KVManager(mem, Auditor("record"))
    s = m.admit(0)
    assert m.pd_prealloc(s, 60)  # cursor 32
    assert m.check(0) == []
    s.swa_evicted = 40  # not a page boundary
    assert "K6" in [v.id for v in m.check(1)]
    s.swa_evicted = 16  # aligned, but back from 40
    back = [v for v in m.check(2) if v.id == "K6"]
    assert back and back[0].values["previous"] == 40


def test_k4_state_check_sees_a_reservation_that_no_longer_covers():
    m, s = prefilled()
    assert m.prepare([s], 8) and s.allocated == 48 and m.check(0) == []
    m.reserve_base[s.row] = 44  # as if committed had been 44 at the prepare: 44 + 8 > 48
    assert [v.id for v in m.check(1)] == ["K4"]
