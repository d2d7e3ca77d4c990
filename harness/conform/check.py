"""Conformance: replay kvbench allocation traces on SGLang's own allocator and sizing code.

Every record of a trace (DESIGN.md section 5) is re-run on the production objects:

* allocator calls (alloc_extend, free, free_pages) on a fresh SGLang allocator per
  pool ("full", "swa"): PagedTokenToKVPoolAllocator for ps > 1, TokenToKVPoolAllocator
  for ps == 1 (what SGLang builds at that page size), with need_sort as the trace's
  frees say. Checked: the slots of every output (so page membership and order), a
  refusal (None) where kvbench refused, and the free count (`available`) after the call.
* the installed SGLang must be the release of the trace's profile (0.5.23, or 0.5.18
  for sglang-pre-35265: harness.conform.versions); another is refused in one line.
* prepare: every request's `nxt` against SGLang's page_aligned_decode_alloc_lens when
  the record is aligned (0.5.18: its inline rule, reproduced); against max(cur,
  committed + reserve) when it is not (0.5.18's DFLASH rule, reproduced: it sits inside
  dflash_info_v2.prepare_for_decode, which needs a GPU batch to run). The
  reserve itself is checked against get_alloc_reserve_per_decode (SGLang's formula, fed
  the trace header's spec options) when the header names them. A reservation kvbench
  cut at the row's end (the header's row_width) where SGLang's nxt runs past it is
  the row overflow of SGLang issue 33579 (K4): SGLang writes past the row there (as the
  sglang-* profiles do; a cutting profile does not), so it is counted as a row overflow, not a divergence, and the
  replay goes on from kvbench's cut extent.
* swa_prealloc: the PD decode side's SWA tail, SGLang 0.5.23's _swa_tail_len rule,
  reproduced (its module needs the whole disaggregation stack to import).
* the prefix tree's calls (match, insert, lock, unlock, evict; trace version 2) on
  SGLang's own RadixCache, in trace order between the allocator calls:
  harness/conform/tree.py; the SWA-aware tree's (the ``swa_`` records) on SGLang's
  UnifiedRadixCache with the FULL and SWA components: harness/conform/swa_tree.py.

The first divergence of a trace stops its replay: past it the two allocators hold
different free lists, and every later call would diverge for the same reason.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from dataclasses import dataclass
from types import SimpleNamespace

from harness.conform.swa_tree import SWATreeConform
from harness.conform.tree import TreeConform
from harness.conform.versions import SGLangMissing, aligned_nxt, check_version, free_page_ids
from harness.core.causes import one_line
from mini_engine import algos
from mini_engine.errors import TraceError
from mini_engine.memory.replay.run import Divergence
from mini_engine.memory.trace.reader import (_short, check_algos, header_pd_radix, pool_need_sort, prepare_aligned,
                                             check_profile, read_trace)
from mini_engine.memory.trace.tree_calls import SWA_TREE_OPS, TREE_OPS
from mini_engine.config.profiles import SGLANG_VERSIONS

SGLANG_VERSION = "0.5.23"
INSTALL = (f"pip install --no-deps sglang=={SGLANG_VERSION} && pip install 'kvbench[conform]' "
           "(docs/conform.md)")


@dataclass
class ConformReport:
    path: str
    calls: int = 0
    allocator_calls: int = 0
    reservations: int = 0  # requests whose nxt was checked
    reserves: int = 0  # prepare records whose reserve was checked against SGLang's formula
    row_overflows: int = 0  # reservations cut at the row where SGLang's runs past it (K4)
    tree_calls: int = 0  # prefix tree calls checked on SGLang's RadixCache (harness/conform/tree.py)
    swa_tree_calls: int = 0  # SWA tree calls checked on SGLang's UnifiedRadixCache (conform_swa_tree.py)
    first_divergence: Divergence | None = None

    @property
    def conforms(self) -> bool:
        return self.first_divergence is None


def load_sglang() -> SimpleNamespace:
    """The production modules conform calls; SGLangMissing (one line) when they cannot load."""
    names = {
        "paged": "sglang.srt.mem_cache.allocator.paged",
        "token": "sglang.srt.mem_cache.allocator.token",
        "sizing": "sglang.srt.mem_cache.allocation_sizing",
        "spec_info": "sglang.srt.speculative.spec_info",
    }
    # conform builds SGLang's allocators on the CPU. 0.5.18 launches its triton allocation
    # kernels whatever the device, which on a CPU only triton's interpreter can run (read
    # when triton first loads); 0.5.23 takes its torch path there and never reaches it.
    os.environ.setdefault("TRITON_INTERPRET", "1")
    mods = {}
    for key, name in names.items():
        try:
            mods[key] = importlib.import_module(name)
        except Exception as err:  # an ImportError, or a dependency failing at import time
            what = one_line(err)
            raise SGLangMissing(f"conform needs SGLang {SGLANG_VERSION} (0.5.18 for sglang-pre-35265 traces; "
                                f"{name} does not import: {what}); "
                                f"install it with: {INSTALL}") from None
    import sglang  # sglang: optional, loaded only on this path
    import torch  # torch: optional, loaded only on this path

    return SimpleNamespace(torch=torch, version=getattr(sglang, "__version__", "unknown"), **mods)


def conform(path: str | os.PathLike, sg: SimpleNamespace) -> ConformReport:
    path = os.fspath(path)
    head, records = read_trace(path)
    check_profile(path, head, records, SGLANG_VERSIONS)  # a header at odds with itself or its records
    check_version(path, head, sg.version)  # a trace of another release's profile: one line, exit 2
    ps = head["page_size"]
    need_sort = pool_need_sort(path, records)
    # The decode-side radix cache widens the PD SWA tail: a profile knob (or a config key),
    # where the release's _swa_tail_len has that variant (0.5.18's has none).
    pd_radix = header_pd_radix(path, head)
    pools = {"full": _allocator(sg, head["num_pages"], ps, need_sort.get("full", False))}
    if head.get("swa_num_pages"):
        pools["swa"] = _allocator(sg, head["swa_num_pages"], ps, need_sort.get("swa", False))
    config = head.get("config") or {}
    check_algos(path, config, records, algos.writers())
    spec_reserve = _spec_reserve(sg, config, ps)

    report = ConformReport(path)
    tree = TreeConform(sg, ps)
    swa_tree = SWATreeConform(head, tree.tokens)  # the same tokens records key both trees
    for lineno, rec in records:
        report.calls += 1
        op = rec["op"]
        try:
            if op == "prepare":
                found = _check_prepare(sg, rec, ps, spec_reserve, report, head.get("row_width"))
            elif op == "swa_prealloc":
                found = _check_swa_prealloc(rec, ps, pd_radix)
            elif op in TREE_OPS:
                found = tree.check(rec)
            elif op in SWA_TREE_OPS:
                found = swa_tree.check(rec)
            else:
                report.allocator_calls += 1
                pool = rec.get("pool", "full")
                try:
                    found = _check_call(sg, pools[pool], rec, ps)
                except (RuntimeError, AssertionError, IndexError) as err:  # SGLang refused the call itself
                    found = ("result", "a result", one_line(err))
                if found is not None:
                    found = (f"pool {pool} {found[0]}",) + found[1:]
                tree.saw_free(rec)
        except (KeyError, TypeError, ValueError) as err:
            raise TraceError(f"{path}: line {lineno} ({op}) is malformed ({err})") from None
        if found is not None:
            fld, expected, got = found
            report.first_divergence = Divergence(report.calls, lineno, op, fld, expected, got)
            break
    else:
        found = tree.finish()
        if found is not None and records:
            lineno, rec = records[-1]
            report.first_divergence = Divergence(report.calls, lineno, rec["op"], *found)
    report.tree_calls, report.swa_tree_calls = tree.calls, swa_tree.calls
    return report


def describe(d: Divergence) -> str:
    """One line: where, what, kvbench's recorded value and SGLang's."""
    return (f"call {d.call} (line {d.line}) {d.op}: {d.field}: kvbench {_short(d.expected)}, "
            f"sglang {_short(d.got)}")


# -- allocator calls -----------------------------------------------------------------

def _allocator(sg, num_pages: int, ps: int, need_sort: bool):
    torch = sg.torch
    if ps == 1:
        return sg.token.TokenToKVPoolAllocator(num_pages, torch.int64, "cpu", None, need_sort)
    return sg.paged.PagedTokenToKVPoolAllocator(num_pages * ps, ps, torch.int64, "cpu", None, need_sort)


def _check_call(sg, alloc, rec: dict, ps: int):
    """(field, kvbench's value, SGLang's value) of the first mismatch, or None."""
    torch = sg.torch
    op = rec["op"]
    if op == "alloc_extend":
        prefix = torch.tensor(rec["prefix_lens"], dtype=torch.int64)
        seq = torch.tensor(rec["seq_lens"], dtype=torch.int64)
        last = torch.tensor(rec["last_locs"], dtype=torch.int64)
        if not (len(prefix) == len(seq) == len(last)) or bool((seq < prefix).any()):
            raise ValueError("prefix_lens, seq_lens, last_locs: one entry per request, prefix <= seq")
        if rec.get("decode", False) and bool((seq - prefix != 1).any()):
            raise ValueError("a decode call allocates one slot per request (seq_len = prefix_len + 1)")
        lens = (seq - prefix).tolist()
        n = sum(lens)
        if ps == 1:
            out = alloc.alloc(n)
        elif rec.get("decode", False):
            out = alloc.alloc_decode(seq, seq.clone(), last)
        else:
            out = alloc.alloc_extend(prefix, prefix.clone(), seq, seq.clone(), last, n)
        got = None if out is None else [t.tolist() for t in torch.split(out, lens)]
        want = rec["out"]
        if (got is None) != (want is None):
            return "out", want, got
        if got is not None:
            if not isinstance(want, list) or len(want) != len(got):
                return "out", want, got
            for i, (w, g) in enumerate(zip(want, got)):
                if w != g:
                    return f"out[{i}] (pages {_pages(w, ps)} vs {_pages(g, ps)})", w, g
    elif op == "free":
        idx = torch.tensor(rec["indices"], dtype=torch.int64)
        alloc.free(idx)
    else:
        free_page_ids(sg, alloc, torch.tensor(rec["page_ids"], dtype=torch.int64))
    got_avail = int(alloc.available_size())
    if got_avail != rec["available"]:
        return "available", rec["available"], got_avail
    return None


def _pages(slots, ps: int) -> list[int]:
    seen: list[int] = []
    for s in slots if isinstance(slots, list) else []:
        if isinstance(s, int) and (not seen or seen[-1] != s // ps):
            seen.append(s // ps)
    return seen


# -- planning records ------------------------------------------------------------------

def _check_prepare(sg, rec: dict, ps: int, spec_reserve: dict, report: ConformReport, row_width: int | None):
    reserve = rec["reserve"]
    algo = rec.get("algo")
    if algo in spec_reserve:
        report.reserves += 1
        if reserve != spec_reserve[algo]:
            return "reserve", reserve, spec_reserve[algo]
    aligned = prepare_aligned(rec)
    for i, r in enumerate(rec["reqs"]):
        cur, committed, nxt = r["cur"], r["committed"], r["nxt"]
        if aligned:
            want = aligned_nxt(sg, cur, committed, reserve, ps)
        else:
            want = max(cur, committed + reserve)  # pre-35265, reproduced
        report.reservations += 1
        if row_width is not None and nxt == row_width < want:
            report.row_overflows += 1  # K4: SGLang's reservation runs past the row; kvbench cut it
            continue
        if nxt != want:
            return f"reqs[{i}].nxt (rid {r.get('rid')}, committed {committed}, cur {cur})", nxt, want
    return None


def _check_swa_prealloc(rec: dict, ps: int, pd_radix: bool):
    """SGLang's decode-side SWA tail (DecodePreallocQueue._swa_tail_len), reproduced; pd_radix:
    0.5.23's decode-radix window start (0.5.18 has none)."""
    fill, window = rec["fill_len"], rec["window"]
    if ps == 1 or fill <= 0 or window is None or window <= 0:
        tail = max(fill, 0)  # no tail path at ps 1: the whole fill gets SWA slots
    else:
        start = max(0, fill - 1 - max(window, ps)) if pd_radix else max(0, fill - window)
        tail = fill - start // ps * ps
    if rec["tail"] != tail:
        return "tail", rec["tail"], tail
    if rec["evicted"] != fill - tail:
        return "evicted", rec["evicted"], fill - tail
    return None


def _spec_reserve(sg, config: dict, ps: int) -> dict[str, int]:
    """{algo: SGLang's per-step reserve}: "none" (plain decode: one slot a step) always,
    plus the spec algorithm the header names when it names all of its options."""
    out = {"none": _sglang_reserve(sg, ps, None, 1, 1, None, doubled=False)}

    algo = algos.ALGORITHMS.get(config.get("spec"))
    args = algo.sglang_spec(config) if algo is not None else None
    if args is not None:  # keyed as the prepare records name it: the writer it plans as
        name, steps, topk, ndt = args
        out[algo.writer_name] = _sglang_reserve(sg, ps, name, steps, topk, ndt)
    return out


def _sglang_reserve(sg, ps: int, algo, steps: int, topk: int, ndt, *, doubled: bool = True) -> int:
    spec = SimpleNamespace(speculative_algorithm=algo, speculative_num_steps=steps,
                           speculative_eagle_topk=topk, speculative_num_draft_tokens=ndt,
                           max_speculative_num_draft_tokens=None)
    bags = {"get_spec": lambda: spec,
            "get_schedule": lambda: SimpleNamespace(page_size=ps),
            "get_parallel": lambda: SimpleNamespace(attn_dcp_size=1),
            "max_speculative_num_draft_tokens": lambda: ndt}
    with _patched(sg.sizing, bags):
        # Plain decode allocates its one slot without the overlap double buffer.
        fn = sg.sizing.get_alloc_reserve_per_decode if doubled else sg.sizing.get_alloc_len_per_decode
        return int(fn())


@contextlib.contextmanager
def _patched(module, values: dict):
    """SGLang reads its server settings from process-wide bags; feed the trace's, then restore."""
    values = {k: v for k, v in values.items() if hasattr(module, k)}  # 0.5.18 reads no get_parallel
    old = {k: getattr(module, k) for k in values}
    try:
        for k, v in values.items():
            setattr(module, k, v)
        yield
    finally:
        for k, v in old.items():
            setattr(module, k, v)
