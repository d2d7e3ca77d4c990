"""The admission policies behind the one pass (mini_engine/scheduler/admission.py): what
each reads and when, on small worked numbers; the engine suites and the *_vs_sglang
conformance tests check the pass itself."""

from __future__ import annotations

from types import SimpleNamespace

from mini_engine.scheduler.admission import Estimate, PDPrealloc, PrefillAdder
from mini_engine.scheduler.prefill_tokens import PrefillTokens


def test_estimate_reads_the_free_pages_once_per_pass_and_keeps_its_own_count():
    reads = []
    est = Estimate(lambda: reads.append(1) or 10, lambda r, matched: 6 - matched)
    est.begin()
    assert est.free == 10 and reads == [1]
    assert est.fits("a", None, 0)  # needs 6 of 10
    est.adopted(2)  # its match handed back 2 pages
    est.joined()
    assert est.free == 6  # 10 + 2 - 6, without reading the pool again
    assert est.fits("b", None, 0)  # 6 of 6: fits
    est.joined()
    assert est.free == 0 and not est.fits("c", None, 1)  # 5 of 0
    assert reads == [1]


def test_estimate_continues_by_the_chunk_budget_alone():
    chunks = PrefillTokens(64, 16)
    est = Estimate(lambda: 0, lambda r, m: 0)
    assert est.continuation(100, chunks) == chunks.continuation(100)
    assert est.cap is None and not est.full and not est.stops(chunks)


def test_pd_prealloc_builds_its_budget_at_the_first_arrival_only():
    built = []

    class Budget:
        idles = False

        def fits(self, r, prefix, pinned):
            return r == "fits"

    def build(finished):
        built.append(1)
        return Budget()

    manager = SimpleNamespace(swa=None, prefix=None)
    pd = PDPrealloc(build, manager)
    assert pd.budget is None and built == []  # a pass without a PD arrival builds nothing
    assert pd.fits("fits", None, 0) and not pd.fits("waits", None, 0)
    assert built == [1]


def test_pd_prealloc_rebuilds_without_the_finished_when_sglang_would_idle():
    """A refusal by a budget that counts only requests finished since the last pass: SGLang
    idles that iteration and its next pass, without them, decides (pd_prealloc.unfiltered)."""
    built = []

    class Budget:
        def __init__(self, finished):
            self.idles = finished

        def fits(self, r, prefix, pinned):
            return not self.idles

    def build(finished):
        built.append(finished)
        return Budget(finished)

    pd = PDPrealloc(build, SimpleNamespace(swa=None, prefix=None))
    assert pd.fits("r", None, 0) and built == [True, False]


def test_a_spent_compute_budget_stops_the_adder_unless_memory_is_spent_too():
    mem = SimpleNamespace(rem_input=0, has_room=True)
    adder = PrefillAdder(mem, SimpleNamespace(prefix=None))
    chunks = PrefillTokens(64, 16)
    assert adder.stops(chunks)  # max_prefill_tokens spent (OTHER)
    mem.has_room = False
    assert not adder.stops(chunks) and adder.full  # NO_TOKEN: the pass goes on to close the gate
