"""The device mirror of req_to_token and the SWA map, and K10 over it.

The memory layer's tables are host numpy arrays that log their writes
(memory.changes); the model backend's DeviceMirror copies the logged entries once
per forward. A follower that replays the logs after any sequence of the memory
layer's writers (extend, prepare, PD prealloc, SWA eviction, release under every
free rule) must equal the host tables, and K10 must report a mirror that does not.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

# The device mirror is a torch tensor: the one memory test a numpy-only machine skips.
torch = pytest.importorskip("torch")

from hypothesis import given, settings
from hypothesis import strategies as st

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.memory.audit.pool_checks import check_k10
from mini_engine.memory.audit.record import Auditor
from mini_engine.memory.batch import BatchArrays
from mini_engine.memory.config import MemoryConfig
from mini_engine.memory.manager import KVManager
from mini_engine.memory.pool.changes import ChangeLog
from mini_engine.model.attn_meta import build_meta, decode_meta
from mini_engine.model.backend import ModelBackend
from mini_engine.model.mirror import DeviceMirror
from mini_engine.request import Request
from mini_engine.forward.step_batch import Layout, MirrorFeed


class HostFollower:
    """DeviceMirror's rule on numpy: copy the host entries the logs name."""

    def __init__(self, m: KVManager):
        self.m = m
        self.table = m.req_to_token.host.copy()
        m.req_to_token.changes.follow()
        self.swa = m.swa.map_host.copy() if m.swa is not None else None
        if m.swa is not None:
            m.swa.map_changes.follow()

    def sync(self) -> None:
        idx = self.m.req_to_token.changes.drain()
        self.table.reshape(-1)[idx] = self.m.req_to_token.host.reshape(-1)[idx]
        if self.swa is not None:
            idx = self.m.swa.map_changes.drain()
            self.swa[idx] = self.m.swa.map_host[idx]

    def rows(self, rows, width):
        return self.table[rows, :width]

    def swa_of(self, slots):
        return None if self.swa is None else self.swa[slots]


class Followed(DeviceMirror):
    """A mirror fed as the engine feeds it: the manager's change logs drained into updates."""

    def __init__(self, m: KVManager, device: torch.device):
        super().__init__(Layout.of(m.mem), device)
        self.feed = MirrorFeed(m)

    def sync(self) -> None:
        self.apply(self.feed.drain())


def manager(ps: int, free: str, swa: bool = True, auditor: str = "raise") -> KVManager:
    mem = MemoryConfig(ps, 4096 // ps, 8, 400, free_policy=free, prefix_cache="chunk",
                       swa_num_pages=4096 // ps if swa else None, window=24 if swa else None)
    return KVManager(mem, Auditor(auditor))


def drive(m: KVManager, seed: int, steps: int, after_step) -> None:
    """Random steps of every memory-layer writer; after_step(ready) after each."""
    rng = random.Random(seed)
    live = []
    for step in range(steps):
        ready = []
        if len(live) < 8 and rng.random() < 0.3:
            s = m.admit(step)
            if rng.random() < 0.5:
                assert m.pd_prealloc(s, rng.randint(1, 100))
            else:
                assert m.extend(s, n := rng.randint(1, 100))
                m.commit(s, n)
            live.append(s)
        elif live and rng.random() < 0.8:
            ready = [s for s in live if s.committed < 300]
            for s in ready:
                m.evict_swa(s, s.committed, interval=1)
            if ready and m.prepare(ready, 32):
                for s in ready:
                    m.commit(s, rng.randint(1, 16))
        elif live:
            m.release(live.pop(rng.randrange(len(live))))
        after_step(ready)
    for s in live:
        m.release(s)
    after_step([])


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**16), ps=st.sampled_from([1, 4, 16]),
       free=st.sampled_from(["segment", "floor", "dedup"]), swa=st.booleans())
def test_a_follower_of_the_logs_equals_the_host_tables(seed, ps, free, swa):
    m = manager(ps, free, swa, auditor="record")  # floor leaks by design: recorded, not raised
    f = HostFollower(m)

    def check(_ready):
        f.sync()
        assert np.array_equal(f.table, m.req_to_token.host)
        if swa:
            assert np.array_equal(f.swa, m.swa.map_host)
    drive(m, seed, 80, check)


@pytest.mark.parametrize("ps", [1, 16])
def test_device_mirror_follows_and_k10_holds(ps):
    m = manager(ps, "segment")
    mirror = Followed(m, torch.device("cpu"))
    assert not np.shares_memory(mirror.table.numpy(), m.req_to_token.host)

    def check(ready):
        mirror.sync()
        assert torch.equal(mirror.table, torch.from_numpy(m.req_to_token.host))
        assert torch.equal(mirror.swa_map, torch.from_numpy(m.swa.map_host))
        live = [s for s in ready if not s.released]
        assert check_k10(m, 0, BatchArrays.from_states(live), mirror) == []
    drive(m, ps, 120, check)
    assert mirror.syncs > 0 and m.syncs == 0


@pytest.mark.parametrize("ps", [1, 16])
def test_mirror_sync_only_writes_the_device(ps):
    # A meta tensor has no data: any read back (.cpu(), .item()) raises, writes are accepted.
    with pytest.raises((NotImplementedError, RuntimeError)):
        torch.zeros(2, device="meta").cpu()
    m = manager(ps, "floor", auditor="record")
    mirror = Followed(m, torch.device("meta"))
    drive(m, ps + 7, 120, lambda _ready: mirror.sync())
    assert m.syncs == 0 and mirror.syncs > 0


def test_nothing_is_logged_without_a_follower():
    m = manager(16, "segment")
    drive(m, 3, 60, lambda _ready: None)
    assert not m.req_to_token.changes.following and len(m.req_to_token.changes.drain()) == 0
    assert len(m.swa.map_changes.drain()) == 0


def _decoding(m: KVManager) -> tuple[list, BatchArrays, DeviceMirror]:
    mirror = Followed(m, torch.device("cpu"))
    states = []
    for i in range(4):
        s = m.admit(i)
        assert m.extend(s, 20 + 9 * i)
        m.commit(s, 20 + 9 * i)
        states.append(s)
    assert m.prepare(states, 8)
    mirror.sync()
    return states, BatchArrays.from_states(states), mirror


def test_k10_reports_a_mirror_row_that_differs():
    m = manager(16, "segment")
    states, batch, mirror = _decoding(m)
    assert check_k10(m, 0, batch, mirror) == []
    mirror.table[states[2].row, 5] += 1
    got = check_k10(m, 0, batch, mirror)
    assert [(v.rid, v.values["reason"]) for v in got] == [(2, "device row != host row")]
    # Past the planned extent the forward reads nothing: a difference there is not K10.
    mirror.table[states[2].row, 5] -= 1
    mirror.table[states[1].row, states[1].allocated + 3] = 7
    assert check_k10(m, 0, batch, mirror) == []


def test_k10_reports_a_mirror_swa_map_that_differs():
    m = manager(16, "segment")
    states, batch, mirror = _decoding(m)
    slot = int(m.req_to_token.host[states[3].row, states[3].allocated - 1])
    mirror.swa_map[slot] = 0
    got = check_k10(m, 0, batch, mirror)
    assert [(v.rid, v.values["reason"]) for v in got] == [(3, "device SWA map != host map")]


def test_k10_reports_a_write_the_log_missed(monkeypatch):
    m = manager(16, "segment")
    states, batch, mirror = _decoding(m)
    monkeypatch.setattr(ChangeLog, "add", lambda self, flat: None)  # every slot write unlogged
    assert m.prepare(states, 40)
    mirror.sync()
    batch.set_allocated(batch.plan_extents(40, m.ps, m.step_aligned, m.mem.row_width))
    assert {v.rid for v in check_k10(m, 0, batch, mirror)} == {s.rid for s in states}


@pytest.mark.parametrize("ps", [1, 4])
def test_flat_decode_meta_from_the_mirror_equals_the_host_rows(ps):
    m = manager(ps, "segment")
    states, _, mirror = _decoding(m)
    lens = np.array([s.committed + 1 for s in states])
    rows = [m.slots(s, 0, int(n)) for s, n in zip(states, lens)]
    got = decode_meta(mirror.table, np.array([s.row for s in states]), lens, ps, mirror.swa_map, flat=True)
    want = build_meta(rows, [1] * len(rows), None, "cpu", swa_rows=[m.swa.translate(r) for r in rows])
    for name in ("kv_indptr", "q_indptr", "q_pos", "tok_seq", "kv_slots", "out_slots", "swa_kv_slots",
                 "swa_out_slots"):
        assert torch.equal(getattr(got, name), getattr(want, name)), name
    assert got.page_size == 0 and got.max_kv == want.max_kv


# -- in the engine ---------------------------------------------------------------

def _requests() -> list[Request]:
    return [Request(rid=i, prompt=[(5 * i + j) % 97 + 1 for j in range(6 + 3 * i)], max_new_tokens=12 + 2 * i,
                    arrival_step=i // 2) for i in range(6)]


def _tiny(**opts) -> EngineConfig:
    return EngineConfig(model="tiny", page_size=4, pool_tokens=1024, max_context=64, max_running=4, **opts)


@pytest.mark.parametrize("opts", [{}, {"window": 8, "layer_pattern": "1:1"}], ids=["global", "swa"])
def test_plain_decode_reads_the_mirror_and_k10_stays_zero(opts):
    engine = Engine(_tiny(**opts))
    result = engine.run(_requests())
    assert result.verdict == "ok" and result.violations == {}
    mirror = engine.backend.mirror
    assert mirror is not None and mirror.syncs >= result.stats["decode_steps"] // 2


@pytest.mark.slow
def test_triton_decode_reads_the_mirror_and_matches_torch():
    # The Triton kernels (through Triton's interpreter on a CPU) take the flat layout,
    # gathered from the same mirror: greedy outputs equal the torch path's.
    cfg = _tiny(window=8, layer_pattern="1:1")
    runs = {}
    for attention in ("torch", "triton"):
        engine = Engine(cfg, ModelBackend(cfg, attention=attention))
        result = engine.run([Request(rid=i, prompt=[3 * i + 1, 2, 5 + i], max_new_tokens=6 + i) for i in range(3)])
        assert result.verdict == "ok" and result.violations == {}
        assert engine.backend.mirror.syncs > 0
        runs[attention] = result.outputs
    assert runs["triton"] == runs["torch"]


def test_a_mirror_that_misses_writes_fires_k10_in_the_engine(monkeypatch):
    orig = ChangeLog.add
    calls = []

    def lossy(self, flat):
        calls.append(1)
        if len(calls) % 3:  # two writes in three never reach the device
            orig(self, flat)
    monkeypatch.setattr(ChangeLog, "add", lossy)
    result = Engine(_tiny()).run(_requests())
    assert result.violations.get("K10", 0) > 0
    assert any(v["values"].get("reason") == "device row != host row" for v in result.violation_samples)


def test_only_the_reader_keeps_a_mirror():
    accounting = Engine(EngineConfig(page_size=4, pool_tokens=1024, max_context=64))
    assert getattr(accounting.backend, "mirror", None) is None
    assert not accounting.manager.req_to_token.changes.following
    spec = Engine(_tiny(spec="dflash", block_size=4))  # verify and drafts read host rows
    assert spec.backend.mirror is None and not spec.manager.req_to_token.changes.following
