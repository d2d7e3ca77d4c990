"""The one-call prefill batch of suites/unit/engine/test_prefill_batch.py, on SGLang's allocator.

The worked case's calls are traced and replayed by kvbench conform on SGLang 0.5.23's
PagedTokenToKVPoolAllocator with need_sort: SGLang's alloc_extend, given the batch of D
and E in one call, merges the staged frees first and hands out pages 1 and 2, the slots
kvbench's one call gave. Engine traces of a PD run (need_sort from the start, prefill
batches of several requests) conform as well.
"""

from __future__ import annotations

import json

from harness.cli import main
from mini_engine.memory.audit.record import Auditor
from mini_engine.memory.config import MemoryConfig
from mini_engine.memory.manager import KVManager
from mini_engine.memory.trace.writer import TraceWriter


def test_the_batch_call_conforms(sg, tmp_path, capsys):
    path = tmp_path / "batch.jsonl"
    mem = MemoryConfig(4, 8, 4, 64, policy="unaligned", free_policy="segment")
    with TraceWriter.for_memory(path, mem, {}) as trace:
        m = KVManager(mem, Auditor("record"), trace)
        assert m.stage_frees()
        a, b = m.admit("A"), m.admit("B")
        assert m.extend(a, 8) and m.extend(b, 8)
        m.commit(a, 8)
        m.commit(b, 8)
        m.release(b)
        m.release(a)
        d, e = m.admit("D"), m.admit("E")
        assert m.extend_batch([d, e], [4, 4])
    last = json.loads(path.read_text().splitlines()[-1])
    assert last["op"] == "alloc_extend" and last["out"] == [[4, 5, 6, 7], [8, 9, 10, 11]]
    assert main(["conform", str(path)]) == 0, capsys.readouterr().out


def test_pd_run_with_prefill_batches_conforms(sg, tmp_path, capsys):
    path = tmp_path / "pd.jsonl"
    main(["run", "--workload", "pd", "--pd-fraction", "0.5", "--page-size", "16", "--pool-tokens", "1024",
          "--num-requests", "24", "--input-len", "120", "--output-len", "40", "--max-running", "8",
          "--trace", str(path)])
    capsys.readouterr()
    recs = [json.loads(x) for x in path.read_text().splitlines()[1:]]
    batches = [r for r in recs if r["op"] == "alloc_extend" and len(r["seq_lens"]) > 1
               and not r.get("decode") and r["prefix_lens"] != r["seq_lens"]]
    assert batches and any(r.get("need_sort") for r in recs if r["op"] in ("free", "free_pages"))
    rc = main(["conform", str(path)])
    assert rc == 0, capsys.readouterr().out
