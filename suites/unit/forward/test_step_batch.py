"""The step batch: what the engine hands a backend per forward, and the accounting
backend through ``forward``.

The builder is the one reader of the memory plan on a backend's behalf: its batches
carry the positions each request writes, the host slots of the positions it reads
(only for the phases the backend declares), their SWA copies, and the table writes a
device mirror needs. Importing it needs no torch.
"""

from __future__ import annotations

import random
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.memory.audit.record import Auditor
from mini_engine.memory.config import MemoryConfig
from mini_engine.memory.manager import KVManager
from mini_engine.request import Request
from mini_engine.forward.accounting import SimulatedBackend
from mini_engine.forward.step_batch import BatchBuilder, Layout, MirrorFeed, Phase, StepBatch



def run_without_torch(code: str) -> subprocess.CompletedProcess:
    """A fresh interpreter where `import torch` fails (a None entry in sys.modules blocks it)."""
    return subprocess.run([sys.executable, "-c", "import sys\nsys.modules['torch'] = None\n" + code],
                          capture_output=True, text=True, timeout=300)


def manager(ps: int = 4, swa: bool = True) -> KVManager:
    pages = 4096 // ps
    mem = MemoryConfig(ps, pages, 8, 128, swa_num_pages=pages if swa else None, window=8 if swa else None)
    return KVManager(mem, Auditor("raise"))


def decoding(m: KVManager, n: int = 3) -> list[Request]:
    """n requests past their prompt, each with one decode slot planned."""
    reqs = []
    for i in range(n):
        r = Request(rid=i, prompt=list(range(1, 6 + 4 * i)), max_new_tokens=8)
        r.kv = m.admit(i)
        assert m.extend(r.kv, len(r.prompt))
        m.commit(r.kv, len(r.prompt))
        r.prefill_target = r.prefilled = len(r.prompt)
        r.outputs.append(7)
        reqs.append(r)
    assert m.prepare([r.kv for r in reqs], 3)
    return reqs


def test_import_needs_no_torch():
    got = run_without_torch("import mini_engine.forward.step_batch as sb\n"
                            "print(sb.Phase.VERIFY.value, sb.Layout(4, 10, 0, 64, 2).full_slots)")
    assert got.returncode == 0, got.stderr
    assert got.stdout.split() == ["verify", "44"]


def test_layout_from_the_memory_config():
    m = manager(ps=4, swa=True)
    lay = Layout.of(m.mem)
    assert (lay.page_size, lay.num_pages, lay.swa_num_pages, lay.row_width, lay.max_reqs) == (4, 1024, 1024, 128, 8)
    assert lay.has_swa and lay.full_slots == lay.swa_slots == 1025 * 4
    plain = Layout.of(manager(swa=False).mem)
    assert not plain.has_swa and plain.swa_slots == 0


@pytest.mark.parametrize("swa", [True, False])
def test_each_phase_carries_its_positions_and_the_slots_it_reads(swa):
    m = manager(swa=swa)
    reqs = decoding(m)
    for r in reqs[1:]:
        m.evict_swa(r.kv, r.kv.committed)  # a cursor above 0 for some
    build = BatchBuilder(m, reads=set(Phase))
    seq = np.array([r.seq_len for r in reqs])
    dec = build.decode(reqs)
    assert dec.phase is Phase.DECODE and len(dec) == 3
    assert dec.starts.tolist() == (seq - 1).tolist() and dec.ends.tolist() == seq.tolist()
    assert dec.committed.tolist() == [r.kv.committed for r in reqs] == (seq - 1).tolist()
    assert dec.rows.tolist() == [r.kv.row for r in reqs]
    assert dec.swa_cursor.tolist() == [r.kv.swa_evicted for r in reqs]
    ver = build.verify(reqs)
    assert ver.starts.tolist() == (seq - 1).tolist() and ver.ends.tolist() == [r.kv.allocated for r in reqs]
    pre = build.prefill(reqs, [0, 2, 4], [3, 5, 6])
    assert pre.starts.tolist() == [0, 2, 4] and pre.ends.tolist() == [3, 5, 6]
    for batch in (dec, ver, pre):
        for r, end, got in zip(reqs, batch.ends.tolist(), batch.slots):
            assert np.array_equal(got, m.req_to_token.host[r.kv.row, :end])
            assert not np.shares_memory(got, m.req_to_token.host)  # the batch keeps its own copy
        if swa:
            assert [x.tolist() for x in batch.swa_slots] == [m.swa.map_host[x].tolist() for x in batch.slots]
        else:
            assert batch.swa_slots is None
        assert batch.mirror is None  # no mirror was asked for


def test_a_backend_that_reads_nothing_gets_no_slots():
    m = manager()
    reqs = decoding(m)
    build = BatchBuilder(m, reads={Phase.PREFILL})
    assert build.decode(reqs).slots is None and build.verify(reqs).slots is None
    assert build.prefill(reqs, [0] * 3, [2] * 3).slots is not None
    assert not m.req_to_token.changes.following  # nobody keeps a mirror: nothing is logged


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), ps=st.sampled_from([1, 4, 16]))
def test_mirror_updates_rebuild_the_host_tables(seed, ps):
    """Applying every decode batch's update to a copy that starts as zeros gives the host
    tables, after any sequence of the memory layer's writers (a numpy stand-in for the
    device mirror, which does the same index copy)."""
    m = manager(ps=ps, swa=True)
    first = m.admit(99)  # written before the feed starts following: the first update carries it
    assert m.extend(first, 10)
    build = BatchBuilder(m, mirror=True)
    table = np.zeros_like(m.req_to_token.host)
    swa_map = np.zeros_like(m.swa.map_host)
    rng = random.Random(seed)
    live = [first]
    for step in range(60):
        if len(live) < 6 and rng.random() < 0.3:
            s = m.admit(step)
            assert m.extend(s, rng.randint(1, 40))
            m.commit(s, s.allocated)
            live.append(s)
        elif live and rng.random() < 0.8:
            grow = [s for s in live if s.committed < 100]
            for s in grow:
                m.evict_swa(s, s.committed, interval=1)
            if grow and m.prepare(grow, 4):
                for s in grow:
                    m.commit(s, rng.randint(1, 4))
        elif live:
            m.release(live.pop(rng.randrange(len(live))))
        up = build.decode([]).mirror
        table.reshape(-1)[up.r2t_index] = up.r2t_values
        swa_map[up.map_index] = up.map_values
        assert np.array_equal(table, m.req_to_token.host) and np.array_equal(swa_map, m.swa.map_host)
    assert len(build.decode([]).mirror) == 0  # nothing written since: an empty update


def test_a_feed_on_plain_tables_sends_no_map():
    m = manager(swa=False)
    decoding(m, 1)
    up = MirrorFeed(m).drain()
    assert len(up.map_index) == 0 and len(up.r2t_index) > 0


def test_simulated_backend_answers_each_phase_through_forward():
    cfg = EngineConfig(spec="dflash", block_size=4, page_size=4, pool_tokens=1024, max_context=128)
    m = manager()
    reqs = decoding(m)
    be = SimulatedBackend(cfg)
    be.setup(Layout.of(m.mem))
    build = BatchBuilder(m, reads=be.reads, mirror=be.mirror is not None)
    assert be.forward(build.decode(reqs)) == be.tokens([r.rid for r in reqs], [r.seq_len for r in reqs])
    got = be.forward(build.verify(reqs))
    assert got == be.spec_step(reqs) and all(1 <= len(t) <= 4 for t in got)
    ends = [reqs[0].prefill_target, 2, reqs[2].prefill_target]
    assert be.forward(build.prefill(reqs, [0, 0, 0], ends)) == [be.token(0, ends[0]), None, be.token(2, ends[2])]
    for r in reqs:
        r.fill_len = len(r.prompt)
    assert be.forward(build.transfer(reqs)) == [be.token(r.rid, r.fill_len) for r in reqs]


class Recording(SimulatedBackend):
    """The accounting backend, keeping every batch the engine hands it."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.batches: list[StepBatch] = []

    def forward(self, batch):
        self.batches.append(batch)
        return super().forward(batch)


@pytest.mark.parametrize("spec", ["none", "eagle"])
def test_the_engine_hands_over_one_batch_per_forward(spec):
    cfg = EngineConfig(spec=spec, page_size=4, pool_tokens=2048, max_context=96, window=16, layer_pattern="1:1")
    reqs = [Request(rid=i, prompt=list(range(1, 20 + 3 * i)), max_new_tokens=10) for i in range(4)]
    reqs[3].fill_len = len(reqs[3].prompt)  # a PD arrival
    plain = Engine(cfg).run([Request(rid=r.rid, prompt=r.prompt, max_new_tokens=10, fill_len=r.fill_len)
                             for r in reqs])
    be = Recording(cfg)
    engine = Engine(cfg, backend=be)
    result = engine.run(reqs)
    assert result.verdict == "ok" and result.outputs == plain.outputs
    phases = {b.phase for b in be.batches}
    assert phases == {Phase.PREFILL, Phase.TRANSFER, Phase.VERIFY if spec != "none" else Phase.DECODE}
    assert all(b.slots is None and b.mirror is None for b in be.batches)  # it reads no slots
    assert not engine.manager.req_to_token.changes.following
    assert result.stats["decode_steps"] == sum(b.phase in (Phase.DECODE, Phase.VERIFY) for b in be.batches)
