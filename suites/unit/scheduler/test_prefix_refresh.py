"""SGLang 0.5.23's waiting-prefix refresh (mini_engine/scheduler/prefix_refresh.py) on worked numbers.

SGLang counts the prefill passes that reach its queue policy with requests waiting and, on
passes 0, 32, 64, ..., walks the tree for the first 128 waiting requests, last first
(SchedulePolicy._touch_waiting_prefixes). The walk refreshes the recency of a waiting
request's cached prefix, so the next eviction takes another leaf.

The case on the tree: ps 16, a pool of 8 pages. Request A (32 tokens) finishes first, then
B (32 other tokens): the tree holds two unlocked leaves, A's the least recently used, and
4 pages are free. C waits with A's 32 tokens + 16 of its own. An allocation of 96 tokens is
short by 96 - 4 * 16 = 32 tokens, one 2-page leaf: without a refresh the tree evicts A's
leaf (C would then match nothing); after the refresh of pass 0 it evicts B's and C still
matches A's 32 tokens.
"""

from __future__ import annotations

from mini_engine.config.engine_config import EngineConfig
from mini_engine.config.profiles import PROFILES
from mini_engine.engine import Engine
from mini_engine.memory.audit.record import Auditor
from mini_engine.memory.config import MemoryConfig
from mini_engine.memory.manager import KVManager
from mini_engine.request import Request
from mini_engine.scheduler.prefix_refresh import INTERVAL, QUEUE_MAX, PrefixRefresh

A = list(range(1, 33))
B = list(range(101, 133))
C = A + [7] * 16


class Touches:
    """A tree that records which requests' tokens were touched."""

    def __init__(self):
        self.rids: list[object] = []

    def touch(self, tokens, rid=None):
        self.rids.append(rid)


def test_constants_are_sglangs():
    assert (INTERVAL, QUEUE_MAX) == (32, 128)  # WAITING_PREFIX_REFRESH_INTERVAL, WAITING_QUEUE_PREFIX_MATCH_MAX


def test_every_32nd_counted_pass_refreshes_the_first_128_last_first():
    queue = [Request(rid=i, prompt=[1, 2, 3], max_new_tokens=1) for i in range(130)]
    tree, refresh = Touches(), PrefixRefresh()
    fired = [p for p in range(70) if refresh.on_pass(tree, queue)]
    assert fired == [0, 32, 64] and refresh.calls == 70 and refresh.refreshes == 3
    # Three refreshes of 128 requests each, 127 down to 0: the head touched last, most recent.
    assert tree.rids == list(range(127, -1, -1)) * 3


def _manager() -> KVManager:
    mem = MemoryConfig(16, 8, 4, 256, algo="none", rules=PROFILES["sglang-0.5.23"].memory_rules())
    return KVManager(mem, Auditor("raise"))


def _finish(m: KVManager, rid: str, tokens: list[int]) -> None:
    """A request that prefills its prompt and leaves it to the tree."""
    s = m.admit(rid)
    assert m.extend(s, len(tokens))
    m.commit(s, len(tokens))
    m.release(s, tokens, prompt_len=len(tokens))


def _evict_after(refreshed: bool) -> tuple[int, int]:
    """(free pages after the eviction, tokens of C the tree still matches)."""
    m = _manager()
    _finish(m, "A", A)
    _finish(m, "B", B)
    assert (m.tree_pages, m.evictable_pages, m.num_free_pages) == (4, 4, 4)
    if refreshed:
        assert PrefixRefresh().on_pass(m.prefix, [Request(rid="C", prompt=C, max_new_tokens=8)])
    m.prefix.make_room(96)
    return m.num_free_pages, len(m.prefix.match(C)[0])


def test_the_refresh_spares_the_waiting_requests_prefix():
    assert _evict_after(refreshed=False) == (6, 0)  # A's leaf, the least recently used, went
    assert _evict_after(refreshed=True) == (6, 32)  # B's went: C still matches A's 2 pages


def test_only_sglang_0523_refreshes():
    assert PROFILES["sglang-0.5.23"].waiting_prefix_refresh
    # 0.5.18 has no refresh; the designs keep kvbench's tree recency.
    assert not any(p.waiting_prefix_refresh for name, p in PROFILES.items() if name != "sglang-0.5.23")
    assert "waiting_prefix_refresh" not in PROFILES["sglang-0.5.23"].knobs()  # a loop rule, not a knob


def test_no_refresh_without_a_tree_or_on_the_decode_side():
    def sched(**kw):
        return Engine(EngineConfig(page_size=16, pool_tokens=4096, max_context=256, **kw)).sched
    assert sched().refresh is not None
    assert sched(prefix_cache="chunk").refresh is None  # --disable-radix-cache: no prefix sharing
    assert sched(profile="sglang-pre-35265").refresh is None
    s = sched()
    assert s.requeue_back
    s.add([Request(rid=0, prompt=[1] * 20, max_new_tokens=4, fill_len=20)])  # a PD arrival: a decode node
    # No refresh there; a retracted arrival keeps kvbench's front (SGLang's decode side has its own queue).
    assert s.refresh is None and not s.requeue_back
