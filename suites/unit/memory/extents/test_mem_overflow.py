"""Row overflow at ps 1 (SGLang issue 33579; mini_engine.memory.extents.overflow), by hand.

Rows 180 wide (160 + SGLang's 4 + 16 headroom), DFLASH's reserve 32. The worked
example's last two plans: committed 150 -> nxt 182 (cur 177), committed 155 -> nxt 187
(cur 182). SGLang allocates 5 + 5 slots, 7 of them at positions 180..186, past the row;
its release frees row[0:155] and row[155:187], slices the row's width clips at 180.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.memory.audit.record import Auditor
from mini_engine.memory.config import MemoryConfig
from mini_engine.memory.manager import KVManager
from mini_engine.memory.rules import MemoryRules
from mini_engine.request import Request

WIDTH, RESERVE = 180, 32


def make(max_reqs=2, overflow=True):
    rules = replace(MemoryRules(), row_overflow=overflow)
    aud = Auditor("record")
    return KVManager(MemoryConfig(1, 4096, max_reqs, WIDTH, rules=rules), aud), aud


def at_plan(m, s, cur, committed):
    """Grow s to cur, committed (as the run had it before the overflowing plans)."""
    assert m.extend(s, cur)
    m.commit(s, committed - s.committed)


def test_the_worked_example_leaks_the_seven_slots_past_the_row():
    m, aud = make()
    s = m.admit(0)
    assert s.row == 1  # SGLang's first row is its last (free list [1..size] popped from the tail)
    at_plan(m, s, 177, 145)
    assert m.prepare([s], RESERVE) and s.allocated == 177  # committed 145: 177 = 145 + 32 fits
    m.commit(s, 5)
    assert m.prepare([s], RESERVE) and s.allocated == 182  # 5 slots, 2 past the row
    m.commit(s, 5)
    assert m.prepare([s], RESERVE) and s.allocated == 187  # 5 more, all past the row
    assert aud.counts["K4"] == 2
    # Distinct positions past the row: 180..186, each once (the old sum counted 2 + 7 = 9).
    assert m.row_overflow_slots == 7
    assert m.row_overwritten_slots == 0  # the last row: its overflow runs past the table
    assert len(m.req_to_token.past_end) == 7
    held = m.pages_held
    m.release(s)
    assert held == 187 and m.leaked_pages() == 7  # the slots of 180..186 never come back


def test_the_overflow_overwrites_the_next_rows_positions():
    m, aud = make()
    a, b = m.admit("a"), m.admit("b")
    assert (a.row, b.row) == (1, 0)  # b's row is followed by a's in the flat table
    at_plan(m, a, 40, 40)
    at_plan(m, b, 177, 150)
    a_slots = m.req_to_token.host[a.row, :7].copy()
    assert m.prepare([b], RESERVE) and b.allocated == 182
    m.commit(b, 5)
    assert m.prepare([b], RESERVE) and b.allocated == 187
    over = m.req_to_token.host[a.row, :7]
    assert m.row_overflow_slots == m.row_overwritten_slots == 7
    assert not np.intersect1d(over, a_slots).size  # a's first 7 positions now map b's slots
    m.release(b)
    assert m.leaked_pages() == 7
    # a frees the slots b wrote into its row (K8: not a's) and its own 7 stay out: still 7 leaked.
    m.release(a)
    assert m.leaked_pages() == 7 and aud.counts.get("K8") == 1


def test_a_cutting_profile_counts_each_position_once_and_leaks_nothing():
    m, aud = make(overflow=False)
    s = m.admit(0)
    at_plan(m, s, 177, 150)
    assert m.prepare([s], RESERVE) and s.allocated == WIDTH
    m.commit(s, 5)
    assert m.prepare([s], RESERVE) and s.allocated == WIDTH
    assert aud.counts["K4"] == 2 and m.row_overflow_slots == 7 and m.row_overwritten_slots == 0
    m.release(s)
    assert m.leaked_pages() == 0


@pytest.mark.parametrize("profile, leaked, k4", [("sglang-0.5.23", 7, 2), ("host-aligned", 0, 0)])
def test_the_cli_worked_example(profile, leaked, k4):
    """kvbench run --spec dflash --block-size 16 --page-size 1 --max-context 160
    --input-len 60 --output-len 100 --workload fixed --num-requests 1 --accept-len 5."""
    cfg = EngineConfig(spec="dflash", block_size=16, page_size=1, max_context=160, accept_len=5, profile=profile)
    res = Engine(cfg).run([Request(0, [1] * 60, 100)])
    s = res.stats
    assert (s["row_overflow_slots"], s["leaked_pages"], s["row_overwritten_slots"]) == (leaked, leaked, 0)
    assert res.violations.get("K4", 0) == k4
