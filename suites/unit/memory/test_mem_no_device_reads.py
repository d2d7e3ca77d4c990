"""The hot path never reads a device tensor: run it with the twins on torch's meta device.

A meta tensor has no data; any read back to the host (.cpu(), .item(), .numpy())
raises. Writes are accepted. So if planning completes on 'meta', it wrote the twins
and never read them; syncs stays 0 under floor.
"""

from __future__ import annotations

import random

import pytest
import torch

from mini_engine.memory import Auditor, KVManager, MemoryConfig
from mini_engine.memory.batch import BatchArrays


def test_meta_tensors_cannot_be_read():
    with pytest.raises((NotImplementedError, RuntimeError)):
        torch.zeros(2, device="meta").cpu()


@pytest.mark.parametrize("ps", [1, 16])
def test_planning_runs_on_meta_twins_without_syncs(ps):
    mem = MemoryConfig(ps, 4096 // ps, 8, 400, swa_num_pages=4096 // ps, window=24, device="meta", prefix_cache="chunk")
    m = KVManager(mem, Auditor("raise"))
    rng = random.Random(ps)
    live = []
    for step in range(120):
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
            if ready and m.prepare(ready, 32):
                for s in ready:
                    m.commit(s, rng.randint(1, 16))
                    m.evict_swa(s, s.committed, interval=1)
                batch = BatchArrays.from_states(ready, device="meta")
                batch.filter(list(range(0, len(ready), 2)))
        elif live:
            m.release(live.pop(rng.randrange(len(live))))
    for s in live:
        m.release(s)
    assert m.syncs == 0 and m.leaked_pages() == 0
    assert m.num_free_pages == m.total_pages
