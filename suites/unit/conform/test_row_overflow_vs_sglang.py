"""The row overflow of SGLang issue 33579, driven through SGLang 0.5.23's own code on CPU.

The worked example (DFLASH block 16, ps 1, max_context 160, 60 + 100 tokens, accept
5): rows are 160 + 4 + 16 = 180 wide, the reservation is 32. kvbench's run records
its plans (cur, committed -> nxt); each one is replayed here through SGLang's pieces:
  - page_aligned_decode_alloc_lens gives nxt (no row check: 182, then 187);
  - TokenToKVPoolAllocator (ps 1) allocates nxt - cur slots;
  - the assign_req_to_token_pool kernel, compiled from SGLang's source and run on a
    small CPU interpreter of the triton calls it makes, writes them at
    row * width + position of the flat table, so 180..186 land past the row;
  - ReqToTokenPool (compiled from source) hands the first request its last row, so
    those writes run past the tensor's end (a tail here, to see them);
  - release's free_kv_row: coalesce_ranges and free_kv_row_segments over row[start:end],
    a slice the row's width clips.
SGLang ends with 7 slots not back in the allocator: kvbench's leaked_pages.
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from types import SimpleNamespace
from typing import Any, Callable, List, Optional

from harness.cli import main

from sglang_source import classes, functions

RUN = ["run", "--spec", "dflash", "--block-size", "16", "--page-size", "1", "--max-context", "160",
       "--input-len", "60", "--output-len", "100", "--workload", "fixed", "--num-requests", "1",
       "--accept-len", "5"]
WIDTH, MAX_REQS = 180, 4


class _Ptr:
    """A triton pointer: a flat buffer and offsets into it (scalars or tensors)."""

    def __init__(self, buf, off=0):
        self.buf, self.off = buf, off

    def __add__(self, k):
        return _Ptr(self.buf, self.off + k)


def _tl(torch, pid: int) -> SimpleNamespace:
    """The triton.language calls assign_req_to_token_pool makes, on CPU tensors."""

    def load(p, mask=None, other=0):
        off = torch.as_tensor(p.off)
        if mask is None:
            return p.buf[off]
        return torch.where(mask, p.buf[torch.where(mask, off, 0)], torch.as_tensor(other, dtype=p.buf.dtype))

    def store(p, data, mask):
        p.buf[torch.as_tensor(p.off)[mask]] = data[mask].to(p.buf.dtype)

    return SimpleNamespace(constexpr=int, program_id=lambda axis: pid, load=load, store=store,
                           arange=lambda a, b: torch.arange(a, b), sum=lambda x, axis: x.sum(axis),
                           cdiv=lambda a, b: -(-int(a) // b))


def _sglang(sg):
    torch = sg.torch
    ns: dict[str, Any] = {"torch": torch, "Optional": Optional, "Callable": Callable, "List": List, "Any": Any,
                          "GPU_MEMORY_TYPE_KV_CACHE": "kv_cache",
                          "TorchMemorySaverAdapter": SimpleNamespace(
                              create=lambda enable: SimpleNamespace(region=lambda *_: nullcontext()))}
    pool = classes("sglang.srt.mem_cache.memory_pool", {"ReqToTokenPool"}, ns)["ReqToTokenPool"]
    kern = functions("sglang.srt.mem_cache.allocation", {"assign_req_to_token_pool"},
                     {"tl": SimpleNamespace(constexpr=int)})["assign_req_to_token_pool"]
    free = functions("sglang.srt.mem_cache.common", {"coalesce_ranges", "free_kv_row_segments"}, {"torch": torch})
    return pool, kern, free


def test_sglang_leaks_the_slots_it_writes_past_the_row(sg, tmp_path, capsys):
    torch = sg.torch
    path = tmp_path / "t.jsonl"
    main([*RUN, "--trace", str(path), "--json", str(tmp_path / "r.json")])  # exit 1: K4 is a violation
    capsys.readouterr()
    head, *recs = map(json.loads, path.read_text().splitlines())
    assert head["row_width"] == WIDTH
    plans = [r for rec in recs if rec["op"] == "prepare" for r in rec["reqs"]]

    pool_cls, kern, free = _sglang(sg)
    pool = pool_cls(MAX_REQS, WIDTH, "cpu", False)
    assert tuple(pool.req_to_token.shape) == (MAX_REQS + 1, WIDTH)  # row 0: CUDA-graph padding
    row = pool.alloc_rows(1)[0]
    assert row == MAX_REQS  # the last row: the first request has no next row
    # The table as the head of a longer flat buffer, so writes past its end are seen.
    flat = torch.zeros((MAX_REQS + 2) * WIDTH, dtype=torch.int64)
    table = flat[:(MAX_REQS + 1) * WIDTH].view(MAX_REQS + 1, WIDTH)
    alloc = sg.token.TokenToKVPoolAllocator(4096, torch.int64, "cpu", None, False)
    total = alloc.available_size()

    def write(cur: int, nxt: int) -> None:
        out = alloc.alloc(nxt - cur)
        args = [torch.tensor([row]), _Ptr(flat), torch.tensor([cur]), torch.tensor([nxt]), out]
        kern.__globals__["tl"] = _tl(torch, 0)
        kern(*[_Ptr(a) if isinstance(a, torch.Tensor) else a for a in args], WIDTH, 1)

    write(0, plans[0]["cur"])  # the prefill's slots (the first plan's cur)
    nxts = []
    for p in plans:
        req = SimpleNamespace(kv=SimpleNamespace(kv_allocated_len=p["cur"], kv_committed_len=p["committed"]))
        _, (nxt,), _ = sg.sizing.page_aligned_decode_alloc_lens([req], reserve=32, page_size=1)
        assert nxt == p["nxt"], p  # kvbench plans SGLang's nxt, past the row too
        nxts.append(nxt)
        if nxt > p["cur"]:
            write(p["cur"], nxt)
    allocated, committed = nxts[-1], plans[-1]["committed"] + 5
    assert allocated == 187 and (flat[(MAX_REQS + 1) * WIDTH:][:7] > 0).all()  # 180..186 past the tensor

    # release_kv_cache: free_kv_row [0, committed), then the over-allocation [committed, allocated).
    sglang_row = table[row]
    for ranges in ([(0, committed)], [(committed, allocated)]):
        free["free_kv_row_segments"](alloc, [(sglang_row[a:b], a) for a, b in free["coalesce_ranges"](ranges)],
                                     swa_evicted_seqlen=0)
    leaked = total - alloc.available_size()
    assert leaked == 7

    row_json = json.loads((tmp_path / "r.json").read_text())
    metrics = row_json["metrics"] if "metrics" in row_json else row_json["rows"][0]["metrics"]
    assert (metrics["leaked_pages"], metrics["row_overflow_slots"], metrics["row_overwritten_slots"]) == (leaked, 7, 0)
