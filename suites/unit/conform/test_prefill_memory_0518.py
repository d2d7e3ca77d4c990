"""The memory side of admission under sglang-pre-35265 against SGLang 0.5.18's own PrefillAdder.

Skipped unless 0.5.18 is the installed SGLang (the ``sg0518`` fixture); CI runs this file
in its second venv. 0.5.18's adder (managers/schedule_policy.py; it has no
prefill_budget.py) computes 0.5.23's figures inline, except two (mini_engine/
prefill_memory.py):

* the decoding requests' remaining outputs are counted at the scheduler's new-token
  ratio, ``ignore_eos`` or not (0.5.23: at 1.0 for an ``ignore_eos`` request);
* without a tree (``add_one_req_ignore_eos``) a request needs ``ceil_ps(extend)``, not a
  page more, and the finish simulation starts from what is left after the extend alone.

The engine runs as test_prefill_memory_vs_sglang.py runs it (a pool small enough for
memory to bind), and before every admission its state, the scheduler's ratio included,
goes to 0.5.18's adder compiled from source: the requests it admits, where each chunk
ends, and its offsets must equal kvbench's.
"""

from __future__ import annotations

import contextlib
import enum
import logging
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mini_engine.scheduler.prefill_adder import PrefillMemory
from mini_engine.request import Request
from sglang_source import classes
from suites.unit.conform.test_prefill_memory_vs_sglang import MAX_PREFILL_TOKENS, compared_batches, drive

PROFILE = "sglang-pre-35265"


class _Dummy:  # allocator and tree classes the adder's isinstance checks name; never instantiated
    pass


def compile_adder_0518(swa_allocator: type = _Dummy) -> SimpleNamespace:
    """0.5.18's PrefillAdder and AddReqResult compiled from its schedule_policy.py; an
    allocator of class ``swa_allocator`` takes the adder's hybrid-SWA branches."""
    ns = {
        "Enum": enum.Enum, "auto": enum.auto, "contextmanager": contextlib.contextmanager,
        "logger": logging.getLogger("sglang-adder-0518"), "CLIP_MAX_NEW_TOKENS": 4096,
        "IGNORE_EOS_RESERVE_TOKENS": 1, "_IS_HIP": False, "PREFILL_TILE_BUDGET": 0, "Optional": object,
        "is_dsa_prefill_cp_in_seq_split": lambda: False, "is_prefill_context_parallel_enabled": lambda: False,
        "SWATokenToKVPoolAllocator": swa_allocator,
    }
    for name in ("DeepSeekV4HiSparseTokenToKVPoolAllocator", "PureSWATokenToKVPoolAllocator",
                 "UnifiedMambaTokenToKVPoolAllocator"):
        ns[name] = _Dummy
    classes("sglang.srt.managers.schedule_policy", {"AddReqResult", "PrefillAdder"}, ns)
    return SimpleNamespace(adder=ns["PrefillAdder"], result=ns["AddReqResult"])


@pytest.fixture(scope="module")
def adder_0518(sg0518):
    return compile_adder_0518()


class _Range:
    def __init__(self, start: int, end: int):
        self.start, self.end, self.length = start, end, end - start


class _Req:
    """The fields of 0.5.18's Req that its adder reads, for a request without a prefix match."""

    def __init__(self, r: Request, end: int | None = None, done: int = 0):
        self.rid = r.rid
        self.origin_input_ids = list(r.prompt)
        self.output_ids = list(r.outputs)
        self.full_untruncated_fill_ids = (list(r.prompt) + list(r.outputs))[:end]
        self.sampling_params = SimpleNamespace(max_new_tokens=r.max_new_tokens, ignore_eos=True)
        self.prefix_indices = [0] * done  # the chunks already in the row
        self.extend_range = _Range(done, done)
        self.host_hit_length = self.swa_host_hit_length = self.storage_hit_length = 0
        self.last_node = None
        self.retracted_stain = False
        self.req_pool_idx = 1 if done else None

    def set_extend_range(self, start: int, end: int) -> None:
        self.extend_range = _Range(start, end)

    def needs_host_load_back(self) -> bool:
        return False


def admission_0518(sgc, ps: int, chunk: int, cache: str, free: int, decoding: list[Request],
                   chunked: Request | None, waiting: list[Request], ratio: float):
    """0.5.18's batch for this state: [(rid, start, end)] and (total, current, rem_input)."""
    tree = SimpleNamespace(disable=cache == "chunk", supports_mamba=lambda: False, evictable_size=lambda: 0,
                           is_tree_cache=lambda: False, inc_lock_ref=lambda node: None,
                           dec_lock_ref=lambda node, *a: None)
    alloc = SimpleNamespace(page_size=ps, available_size=lambda: free)
    batch, adder = run_adder_0518(sgc, ps, chunk, tree, alloc, decoding, chunked, waiting, ratio)
    return batch, (adder.rem_total_token_offset, adder.cur_rem_token_offset, adder.rem_input_tokens)


def run_adder_0518(sgc, ps: int, chunk: int, tree, alloc, decoding: list[Request], chunked: Request | None,
                   waiting: list[Request], ratio: float):
    """One pass of 0.5.18's adder over (stand-in) tree and allocator: ([(rid, start, end)], adder)."""
    running = SimpleNamespace(reqs=[_Req(r) for r in decoding], batch_size=lambda: len(decoding))
    adder = sgc.adder(ps, tree, alloc, running, ratio, MAX_PREFILL_TOKENS, chunk)
    q = None if chunked is None else _Req(chunked, end=chunked.prefill_target, done=chunked.prefilled)
    drive(sgc, adder, q, map(_Req, waiting))
    return [(q.rid, q.extend_range.start, q.extend_range.end) for q in adder.can_run_list], adder


@settings(max_examples=40, deadline=None)
@given(reqs=st.lists(st.tuples(st.integers(1, 900), st.integers(1, 600), st.integers(0, 40)), min_size=1, max_size=10),
       ps=st.sampled_from([1, 16, 64]), chunk_pages=st.integers(2, 24), pool_pages=st.integers(20, 80),
       cache=st.sampled_from(["radix", "chunk"]))
def test_admissions_equal_0518s(adder_0518, reqs, ps, chunk_pages, pool_pages, cache):
    chunk = chunk_pages * max(ps, 16)
    pool = pool_pages * max(ps, 32)
    reqs = [(n, o, a) for n, o, a in reqs if n + o + 2 * max(ps, 16) < pool] or [(10, 10, 0)]
    prompts, outs, arrivals = zip(*reqs)
    compared_batches(adder_0518, prompts, outs, arrivals, ps, chunk, pool, cache, profile=PROFILE,
                     admission=admission_0518)


def test_worked_example_the_ratio_and_the_page(adder_0518):
    """ps 16, 1300 tokens free, no tree; one request decoding with 1000 outputs to go at
    ratio 0.5; one waiting with 700 prompt tokens and 100 outputs. 0.5.18 holds back 500
    for the decoding request and asks 704 of the 800 left: it joins (its simulation
    passes: 1300 - 704 = 596 left, twice the 100 it owes fits, then the other's 1000 once
    it has freed its 700). 0.5.23 would hold back 1000 and ask 720 of 300: it waits."""
    dec = Request(rid=0, prompt=list(range(50)), max_new_tokens=1100)
    dec.outputs = [1] * 100
    new = Request(rid=1, prompt=list(range(10000, 10700)), max_new_tokens=100)
    old = PrefillMemory(lambda: 1300, 16, [dec])
    assert old.total_offset == 1000 and not old.fits_ignore_eos(new, 700)
    mem = PrefillMemory(lambda: 1300, 16, [dec], release="0.5.18", ratio=0.5)
    assert mem.total_offset == 500 and mem.fits_ignore_eos(new, 700)
    mem.charge(new, 700, True)
    batch, budget = admission_0518(adder_0518, 16, 8192, "chunk", 1300, [dec], None, [new], 0.5)
    assert batch == [(1, 0, 700)]
    assert budget == (mem.total_offset, mem.current_offset, mem.rem_input)


@pytest.mark.parametrize("cache", ["radix", "chunk"])
def test_a_bound_pool_is_compared_pass_by_pass(adder_0518, cache):
    """Not vacuous: eight 300-token prompts with 200 outputs each over 1,024 tokens (ps 16),
    arriving two steps apart: passes with requests decoding and one waiting, compared."""
    compared = compared_batches(adder_0518, [300] * 8, [200] * 8, list(range(0, 16, 2)), 16, 512, 1024, cache,
                                profile=PROFILE, admission=admission_0518)
    assert compared >= 3  # radix: passes with evictable pages in the tree are not compared
