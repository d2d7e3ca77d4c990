"""The sglang-0.5.23 profile's other rules against SGLang 0.5.23's own code, side by side.

* row headroom: ``allocation_sizing.get_req_to_token_extra_context_len`` (imported;
  the runtime-context getters it reads are set per case) against
  ``Algorithm.row_headroom(cfg, "sglang")``, and ``get_alloc_reserve_per_decode``
  against the step reserve;
* retraction: ``NewTokenRatioTracker`` (imported) with SGLang's environment defaults, its
  idle reset included, against ``mini_engine.scheduler.retraction.Retraction("sglang")``;
* the SWA pool ratio: the fallback of ``swa_full_tokens_ratio`` in SGLang's schedule
  arguments (read from the installed source) against the profile's 0.8;
* the PD SWA tail: ``DecodePreallocQueue._swa_tail_len`` (its module is too heavy to
  import on a CPU box, so only the method is compiled) against ``pd_swa_tail_len``.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mini_engine.config.engine_config import EngineConfig
from mini_engine.memory.sizing import pd_swa_tail_len
from mini_engine.config.profiles import PROFILES
from mini_engine.scheduler.retraction import Retraction


def _spec_args(cfg: EngineConfig) -> SimpleNamespace:
    """SGLang's speculative arguments for a kvbench config (None: no speculation)."""
    if cfg.spec == "none":
        return SimpleNamespace(speculative_algorithm=None, speculative_num_steps=None,
                               speculative_eagle_topk=None, speculative_num_draft_tokens=None)
    if cfg.spec == "dflash":  # _handle_dflash: one step, topk 1, draft tokens = block size
        return SimpleNamespace(speculative_algorithm="DFLASH", speculative_num_steps=1, speculative_eagle_topk=1,
                               speculative_num_draft_tokens=cfg.block_size)
    return SimpleNamespace(speculative_algorithm="EAGLE", speculative_num_steps=cfg.steps,
                           speculative_eagle_topk=cfg.topk, speculative_num_draft_tokens=cfg.num_draft_tokens)


@pytest.fixture
def sizing(sg, monkeypatch):
    """SGLang's allocation_sizing, reading the runtime context of the config given to set()."""
    mod = sg.sizing

    def set_config(cfg: EngineConfig) -> None:
        spec = _spec_args(cfg)
        monkeypatch.setattr(mod, "get_spec", lambda: spec)
        monkeypatch.setattr(mod, "max_speculative_num_draft_tokens", lambda: spec.speculative_num_draft_tokens)
        monkeypatch.setattr(mod, "get_schedule", lambda: SimpleNamespace(page_size=cfg.page_size))
        monkeypatch.setattr(mod, "get_parallel", lambda: SimpleNamespace(attn_dcp_size=1))

    return SimpleNamespace(mod=mod, set=set_config)


@st.composite
def configs(draw) -> EngineConfig:
    ps = draw(st.sampled_from([1, 2, 16, 64, 256]))
    spec = draw(st.sampled_from(["none", "eagle", "dflash"]))
    if spec == "dflash":
        return EngineConfig(spec=spec, page_size=ps, block_size=draw(st.integers(1, 32)))
    if spec == "eagle":
        topk, steps = draw(st.integers(1, 8)), draw(st.integers(1, 8))
        ndt = steps + 1 if topk == 1 else draw(st.integers(2, steps * topk + 1))
        return EngineConfig(spec=spec, page_size=ps, topk=topk, steps=steps, num_draft_tokens=ndt)
    return EngineConfig(spec=spec, page_size=ps)


# The fixtures are set per input (set() / a stateless class): reusing them across inputs is meant.
REUSED = [HealthCheck.function_scoped_fixture]


@settings(max_examples=200, deadline=None, suppress_health_check=REUSED)
@given(cfg=configs())
def test_row_headroom_and_reserve_equal_sglangs(sizing, cfg):
    sizing.set(cfg)
    assert cfg.algo.row_headroom(cfg, "sglang") == sizing.mod.get_req_to_token_extra_context_len()
    if cfg.speculative:
        assert cfg.step_reserve == sizing.mod.get_alloc_reserve_per_decode()


def test_dflash_at_ps_1_gets_sglangs_short_row(sizing):
    # issue 33579: DFLASH block 16 at ps 1 sizes rows with 4 + 16 = 20, its reservation needs 32.
    cfg = EngineConfig(spec="dflash", block_size=16, page_size=1)
    sizing.set(cfg)
    assert sizing.mod.get_req_to_token_extra_context_len() == 20 == cfg.algo.row_headroom(cfg, "sglang")
    assert cfg.step_reserve == 32


@pytest.fixture
def tracker(sg, monkeypatch):
    mod = importlib.import_module("sglang.srt.managers.scheduler_components.new_token_ratio_tracker")
    monkeypatch.setattr(mod, "get_schedule", lambda: SimpleNamespace(schedule_conservativeness=1.0))
    return mod.NewTokenRatioTracker


def test_retraction_ratio_constants_equal_sglangs(tracker):
    theirs, mine = tracker.from_config(), Retraction("sglang")
    assert (mine.init, mine.min, mine.decay) == pytest.approx((theirs.init, theirs.min, theirs.decay))
    ratio = mine.init
    for _ in range(700):  # through the 600-step decay and past it, to the floor
        theirs.decay_step()
        ratio = mine.decay_step(ratio)
        assert ratio == pytest.approx(theirs.current)
    assert ratio == pytest.approx(0.7 * 0.14)


def test_the_idle_reset_equals_sglangs(tracker):
    """Scheduler.on_idle's reset (once fully idle; test_ratio_idle.py has when kvbench idles)."""
    theirs, mine = tracker.from_config(), Retraction("sglang")
    ratio = mine.init
    for _ in range(50):
        theirs.decay_step()
        ratio = mine.decay_step(ratio)
    theirs.reset()
    assert mine.idle_ratio(ratio) == pytest.approx(theirs.current) and ratio < theirs.current


@settings(suppress_health_check=REUSED)
@given(reqs=st.lists(st.tuples(st.integers(0, 500), st.integers(1, 500)), min_size=1, max_size=10))
def test_ratio_after_a_retraction_equals_sglangs(tracker, reqs):
    from mini_engine.request import Request

    staying = []
    for i, (decoded, extra) in enumerate(reqs):
        r = Request(i, [1], decoded + extra)
        r.outputs = [0] * decoded
        staying.append(r)
    theirs = tracker.estimate_new_token_ratio_after_retract(
        [SimpleNamespace(output_ids=r.outputs, sampling_params=SimpleNamespace(max_new_tokens=r.max_new_tokens))
         for r in staying])
    assert Retraction("sglang").ratio_after(0.5, staying) == pytest.approx(theirs)


def _source(module: str) -> tuple[ast.Module, str]:
    spec = importlib.util.find_spec(module)
    return ast.parse(Path(spec.origin).read_text()), spec.origin


def test_swa_pool_ratio_equals_sglangs_fallback(sg):
    tree, _ = _source("sglang.srt.arg_groups.fields.schedule")
    fallback = None
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "swa_full_tokens_ratio":
            for call in ast.walk(node.annotation):
                if isinstance(call, ast.Call):
                    for kw in call.keywords:
                        if kw.arg == "fallback":
                            fallback = ast.literal_eval(kw.value)
    assert fallback is not None, "swa_full_tokens_ratio no longer declares a fallback"
    assert PROFILES["sglang-0.5.23"].swa_ratio == fallback == 0.8


@pytest.fixture(scope="module")
def sglang_tail(sg):
    tree, origin = _source("sglang.srt.disaggregation.decode")
    klass = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "DecodePreallocQueue")
    body = [n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == "_swa_tail_len"]
    assert body, "DecodePreallocQueue no longer defines _swa_tail_len"
    state = {}
    ns = {"get_disagg": lambda: SimpleNamespace(disaggregation_decode_enable_radix_cache=state["radix"])}
    exec(compile(ast.Module(body=body, type_ignores=[]), origin, "exec"), ns)

    def tail(fill: int, window: int, ps: int, radix: bool) -> int:
        state["radix"] = radix
        # _uses_swa_tail_prealloc: an SWA pool whose allocator pages (ps > 1) and has alloc_extend_swa_tail
        queue = SimpleNamespace(_uses_swa_tail_prealloc=lambda: ps > 1,
                                scheduler=SimpleNamespace(sliding_window_size=window),
                                token_to_kv_pool_allocator=SimpleNamespace(page_size=ps))
        return ns["_swa_tail_len"](queue, fill)

    return tail


@given(fill=st.integers(0, 3000), window=st.integers(1, 600), ps=st.sampled_from([1, 2, 16, 64, 256]),
       radix=st.booleans())
def test_pd_swa_tail_equals_sglangs(sglang_tail, fill, window, ps, radix):
    assert pd_swa_tail_len(fill, window, ps, radix) == sglang_tail(fill, window, ps, radix)


def test_pd_worked_numbers_read_the_same_in_sglang(sglang_tail):
    assert sglang_tail(50, 32, 1, False) == 50  # ps 1: no tail prealloc, every position gets an SWA slot
    assert sglang_tail(64, 32, 16, True) == 48
    assert sglang_tail(64, 32, 16, False) == 32
