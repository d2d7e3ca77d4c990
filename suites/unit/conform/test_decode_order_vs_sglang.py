"""A decode step's allocator calls in SGLang 0.5.23's order, side by side with its own code.

``Scheduler.update_running_batch``, ``ScheduleBatch.check_decode_mem``,
``new_tokens_required_next_decode``, ``retract_decode`` and
``_get_decode_retraction_order`` are compiled from the installed source (their modules
are too heavy to import on a CPU box) and driven on a stand-in batch whose pools are a
kvbench KVManager: check_decode_mem asks SGLang's question (the step's slots against
``min(full, swa)`` available), ``release_req`` releases a request, and
``prepare_for_decode`` does what it does in 0.5.23 for plain decode
(``alloc_for_decode_default``: ``maybe_evict_swa``, then the allocation). The calls that
reach the pools, in order, must be the ones kvbench's scheduler makes for the same
batch: which requests are retracted, and that the window eviction comes after them.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.request import Request
from sglang_source import methods


@pytest.fixture(scope="module")
def sglang_step(sg):  # sg: the installed SGLang, or a skip (a failure under KVBENCH_REQUIRE_SGLANG=1)
    quiet = SimpleNamespace(warning=lambda *a, **k: None)
    common = {"List": list, "Tuple": tuple, "Optional": object, "Req": object, "ScheduleBatch": object,
              "logger": quiet}
    batch = methods("sglang.srt.managers.schedule_batch", "ScheduleBatch",
                     {"check_decode_mem", "new_tokens_required_next_decode", "retract_decode",
                      "_get_decode_retraction_order"},
                     {**common, "num_beam_member_rows": lambda reqs: 0,
                      "beam_retraction_order": lambda order, reqs: order,
                      "get_schedule": lambda: SimpleNamespace(retraction_policy="fcfs"),
                      "NewTokenRatioTracker": SimpleNamespace(
                          estimate_new_token_ratio_after_retract=lambda reqs: 0.5)})
    sched = methods("sglang.srt.managers.scheduler", "Scheduler", {"update_running_batch"},
                     {**common, "TEST_RETRACT": False, "TEST_RETRACT_INTERVAL": 1})
    return batch, sched["update_running_batch"]


class _Batch:
    """The ScheduleBatch fields and hooks the compiled code reads, over a kvbench engine's pools."""

    def __init__(self, fns, eng: Engine, reqs: list[Request], calls: list):
        self.eng, self.calls = eng, calls
        self.reqs = [SimpleNamespace(rid=r.rid, req=r, beam_group=None, output_ids=r.outputs,
                                     origin_input_ids=r.prompt, kv=SimpleNamespace(kv_committed_len=r.kv.committed,
                                                                                  kv_allocated_len=r.kv.allocated))
                     for r in reqs]
        self.spec_algorithm = SimpleNamespace(is_none=lambda: True)
        m = eng.manager
        ps = m.ps
        self.token_to_kv_pool_allocator = SimpleNamespace(
            page_size=ps, available_size=lambda: min(m.num_free_pages, m.swa.allocator.num_free_pages) * ps,
            check_decode_capacity=lambda num_tokens, tree_cache, requests, spec_algorithm:
                min(m.num_free_pages, m.swa.allocator.num_free_pages) * ps >= num_tokens)
        self.tree_cache = None
        self.batch_is_full = False
        for name in ("check_decode_mem", "new_tokens_required_next_decode", "retract_decode"):
            setattr(self, name, fns[name].__get__(self))  # SGLang's methods, bound to this batch
        self._get_decode_retraction_order = fns["_get_decode_retraction_order"]  # a staticmethod there

    def batch_size(self):
        return len(self.reqs)

    def is_empty(self):
        return not self.reqs

    def filter_batch(self, keep_indices=None, reqs_to_exclude=None):
        if keep_indices is not None:
            self.reqs = [self.reqs[i] for i in keep_indices]
        if reqs_to_exclude:
            self.reqs = [r for r in self.reqs if r not in reqs_to_exclude]

    def release_req(self, idx, remaining, offload_kv=True):
        r = self.reqs[idx].req
        self.calls.append(("release", r.rid))
        self.eng.sched.retract(r)
        return True

    def prepare_for_decode(self):
        # alloc_for_decode_default: maybe_evict_swa (from decode_batch_idx 1), then the allocation.
        live = [q.req for q in self.reqs]
        for r in live:
            if r.decode_batches and self.eng.manager.evict_swa(r.kv, r.kv.committed):
                self.calls.append(("evict", r.rid))
        assert self.eng.manager.prepare([r.kv for r in live], 1)
        self.calls.append(("alloc", tuple(r.rid for r in live)))


def _engine(cfg: EngineConfig, prompts: list[int], max_new: int, steps: int) -> tuple[Engine, list[Request]]:
    eng = Engine(cfg)
    eng.sched.ratio = eng.sched.rules.min
    # Prompts sharing no prefix: under the radix default the SWA-aware tree would share
    # them, and the cases would no longer run short and retract.
    reqs = [Request(i, list(range(1000 * i + 1, 1000 * i + p + 1)), max_new) for i, p in enumerate(prompts)]
    eng.submit(reqs)
    for _ in range(steps):
        eng.tick()
    return eng, reqs


def _kvbench_calls(eng: Engine) -> list:
    calls, m = [], eng.manager
    release, evict, prepare = m.release, m.evict_swa, m.prepare

    def on_release(state):
        calls.append(("release", state.rid))
        return release(state)

    def on_evict(state, *a, **k):
        n = evict(state, *a, **k)
        if n:
            calls.append(("evict", state.rid))
        return n

    def on_prepare(states, reserve, **k):
        ok = prepare(states, reserve, **k)
        calls.append(("alloc", tuple(s.rid for s in states)))
        return ok

    m.release, m.evict_swa, m.prepare = on_release, on_evict, on_prepare
    eng.sched.reserve_decode(eng.sched.decode_batch())
    return calls


CASES = [  # (config, prompts, max_new, steps before the decode step compared); each step retracts
    (dict(page_size=1, pool_tokens=64, swa_ratio=0.75, window=20, swa_eviction_interval=4, prefix_cache="chunk"),
     [20, 20], 8, 5),  # the worked case of suites/unit/engine/test_decode_order.py: SWA short, a full tie
    (dict(page_size=1, pool_tokens=64, swa_ratio=0.75, window=20, swa_eviction_interval=4, prefix_cache="chunk"),
     [22, 18], 8, 7),  # SWA short, unequal prompts
    (dict(page_size=1, pool_tokens=96, swa_ratio=0.5, window=8, swa_eviction_interval=4, prefix_cache="chunk"),
     [12, 25, 18], 16, 16),  # three requests
    # The two ps-4 cases admit by kvbench's estimate (at the minimum ratio _engine sets), which
    # takes the third request at the second step: the pools then run short and the step
    # compared retracts. SGLang's SWA budget (the default admission rule) keeps it waiting
    # until a request finishes, so nothing would be retracted to compare.
    (dict(page_size=4, pool_tokens=96, swa_ratio=0.75, window=8, swa_eviction_interval=1, admission="estimate"),
     [12, 25, 18], 16, 14),  # ps 4, the radix threshold
    (dict(page_size=4, pool_tokens=96, swa_ratio=0.75, window=4, swa_eviction_interval=1, admission="estimate"),
     [20, 20, 20], 16, 14),  # ps 4, full ties
    (dict(page_size=1, pool_tokens=96, swa_ratio=0.5, window=8, swa_eviction_interval=4, prefix_cache="chunk"),
     [25, 12, 18], 16, 16),  # the kept batch re-sorted: prompt 12 before 25 (retract_decode's filter_batch)
]


@pytest.mark.parametrize("knobs, prompts, max_new, steps", CASES)
def test_decode_step_calls_equal_sglangs(sglang_step, knobs, prompts, max_new, steps):
    fns, update_running_batch = sglang_step
    # Synchronous: the step compared has no result in flight (update_running_batch excludes none).
    cfg = EngineConfig(layer_pattern="1:1", max_context=128, overlap="off", **knobs)
    ours, _ = _engine(cfg, prompts, max_new, steps)
    mine = _kvbench_calls(ours)
    eng, _ = _engine(cfg, prompts, max_new, steps)
    calls: list = []
    batch = _Batch(fns, eng, eng.sched.decode_batch(), calls)
    scheduler = SimpleNamespace(
        _reqs_finishing_inflight=lambda b: [], decode_offload_manager=None, forward_ct=1,
        token_to_kv_pool_allocator=batch.token_to_kv_pool_allocator,
        new_token_ratio_tracker=SimpleNamespace(current=0.5, decay_step=lambda: None),
        tree_cache=SimpleNamespace(req_to_token_pool=None),
        metrics_reporter=SimpleNamespace(num_retracted_reqs=0, enable_metrics=False),
        beam_coordinator=None, send_abort_output=None, _add_request_to_queue=lambda req, is_retracted: None)
    update_running_batch(scheduler, batch)
    assert calls == mine
    assert calls[0][0] == "release" and calls[-1][0] == "alloc"  # the case does retract


def test_the_kept_batch_is_re_sorted_as_sglangs(sglang_step):
    """Prompts 25, 12, 18 after 16 steps: outputs 15, 15, 13. SGLang retracts the fewest
    outputs (request 2) and keeps [0, 1] in its sort order, most outputs then the shortest
    prompt first: request 1 (prompt 12) before request 0 (prompt 25)."""
    knobs, prompts, max_new, steps = CASES[-1]
    cfg = EngineConfig(layer_pattern="1:1", max_context=128, overlap="off", **knobs)
    eng, reqs = _engine(cfg, prompts, max_new, steps)
    assert [len(r.outputs) for r in reqs] == [15, 15, 13]
    calls = _kvbench_calls(eng)
    assert calls[0] == ("release", 2) and calls[-1] == ("alloc", (1, 0))
    assert [r.rid for r in eng.sched.decode_batch()] == [1, 0]  # the next steps keep that order
