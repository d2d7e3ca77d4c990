"""Overlap scheduling (mini_engine/scheduler/overlap.py), worked numbers read from SGLang 0.5.23's rules.

Under overlap the plan of decode step k sees the committed lengths of step k - 2's
result (step k - 1 is still in flight): the reservation is
max(cur, ceil_ps(committed_stale + 2 * block)) (allocation_sizing
page_aligned_decode_alloc_lens); a request of the in-flight step is left out only
when outputs + 1 >= max_new_tokens (Req.next_output_finishes_by_length); any other
request that the in-flight result finishes gets one more reservation, freed when
that result lands. --overlap off is SGLang's --disable-overlap-schedule.
"""

from __future__ import annotations

import json

import pytest

from harness.run.runner import run_config
from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.errors import ConfigError
from mini_engine.config.profiles import PROFILES, resolve
from mini_engine.request import Request

PROMPT = list(range(1, 38))  # 37 tokens


def run_one(overlap: str, max_new: int, **opts):
    """One DFLASH request (block 16, ps 16, 8 accepted per verify); (committed, extent) after each prepare."""
    cfg = EngineConfig(**{**dict(spec="dflash", block_size=16, page_size=16, accept_len=8, pool_tokens=1 << 12,
                                 max_context=512, overlap=overlap, prefix_cache="chunk"), **opts})
    eng = Engine(cfg)
    eng.submit([Request(0, PROMPT, max_new)])
    plans = []
    prepare = eng.manager.prepare

    def recording(states, reserve, **kw):
        ok = prepare(states, reserve, **kw)
        plans.append([(int(s.committed), int(s.allocated)) for s in states])
        return ok

    eng.manager.prepare = recording
    return eng.run(), plans


def test_one_dflash_request_one_more_reservation():
    """max_new 20: the prefill gives 1 output, then 8 + 8 + 3 (the last verify cut at the limit).

    off: plans from 37, 45, 53: extents 80, 80, ceil16(53 + 32) = 96; the 96 is used by
         the verify that finishes the request.
    on:  plans from 37, 37 (step 1 in flight), 45, 53: extents 80, 80, 80, 96. The plan
         of step 4 sees outputs 17 (17 + 1 < 20): not left out, so it reserves one more
         page (80 -> 96) for a request the landing result of step 3 finishes; that
         page is freed in the same step. Reserved past the true committed length:
         43, 80 - 45 = 35, 80 - 53 = 27, 96 - 56 = 40. SGLang launches that step-4 verify
         (the request still runs when it is launched) and processes its skipped result in
         a sixth iteration, which holds nothing (Profile.launch_finished).
    """
    off, plans = run_one("off", 20)
    assert plans == [[(37, 80)], [(45, 80)], [(53, 96)]]
    m = off.stats
    assert (m["steps"], m["decode_steps"]) == (4, 3)
    assert m["overlap_extra_reservations"] == 0 == m["overlap_extra_slots"]
    assert m["peak_reserved_ahead_slots"] == 43 and m["reserved_ahead_slots_sum"] == 43 + 35 + 43

    on, plans = run_one("on", 20)
    assert plans == [[(37, 80)], [(37, 80)], [(45, 80)], [(53, 96)]]
    m = on.stats
    assert (m["steps"], m["decode_steps"]) == (6, 4)
    assert m["overlap_extra_reservations"] == 1 and m["overlap_extra_slots"] == 16
    assert m["peak_reserved_ahead_slots"] == 43 and m["reserved_ahead_slots_sum"] == 43 + 35 + 27 + 40
    assert on.series["held"] == [3, 5, 5, 5, 0, 0]
    assert on.outputs == off.outputs and on.verdict == off.verdict == "ok"
    assert m["leaked_pages"] == 0 and on.violations == {}


def test_one_token_short_sits_the_plan_out():
    """max_new 18: after step 2 lands the request has 17 outputs, exactly one short, so the
    plan of step 4 leaves it out (no reservation at all; the step only lands step 3's
    result). The synchronous loop reserves 96 for that last verify; overlap never does."""
    off, plans = run_one("off", 18)
    assert plans == [[(37, 80)], [(45, 80)], [(53, 96)]]
    on, plans = run_one("on", 18)
    assert plans == [[(37, 80)], [(37, 80)], [(45, 80)]]
    m = on.stats
    assert (m["steps"], m["decode_steps"]) == (5, 3)
    assert m["overlap_extra_reservations"] == 0
    assert on.outputs == off.outputs


def test_pre_35265_worked_example_under_overlap():
    """test_accounting's DESIGN.md example (4 x prompt 37, 11 outputs, 5 accepted, unaligned
    DFLASH reservation), overlapped: plans from 37, 37, 42: extents 69, 69, 74. The last
    plan gives each request 5 more slots (69 -> 74) that the landing result (their last 5
    tokens) makes useless; release frees [0, ceil16(74)) and nothing leaks. 0.5.18 launches
    that last batch and processes its skipped result in a fifth iteration (launch_finished)."""
    base = dict(spec="dflash", page_size=16, block_size=16, accept_len=5, workload="fixed", num_requests=4,
                input_len=37, output_len=11, pool_tokens=4096, profile="sglang-pre-35265")
    on = run_config(dict(base, overlap="on"))
    off = run_config(dict(base, overlap="off"))
    m = on["metrics"]
    assert on["series"]["stranded"] == [44, 44, 44, 0, 0]  # 80 - 69 = 11 per request until they leave
    assert m["steps"] == 5 and m["output_tokens"] == 44 == off["metrics"]["output_tokens"]
    assert m["overlap_extra_reservations"] == 4 and m["overlap_extra_slots"] == 4 * 5
    # ahead of the true committed lengths: 4 x (69 - 37), 4 x (69 - 42), 4 x (74 - 47)
    assert m["peak_reserved_ahead_slots"] == 128 and m["reserved_ahead_slots_sum"] == 4 * (32 + 27 + 27)
    assert off["metrics"]["reserved_ahead_slots_sum"] == 4 * (32 + 32)
    assert m["leaked_pages"] == 0 and on["status"] == "ok" and on["violations"] == {}


def test_eagle_tree_under_overlap():
    """EAGLE topk 4, steps 3, ndt 8, ps 16 (reserve 256), 3 outputs, 1 accepted per verify: the
    extent 304 stays one step longer (the second verify's plan still sees 1 output, 1 + 1 < 3)."""
    row = run_config(dict(spec="eagle", page_size=16, topk=4, steps=3, num_draft_tokens=8, accept_len=1,
                          workload="fixed", num_requests=1, input_len=37, output_len=3, pool_tokens=4096,
                          prefix_cache="chunk"))  # the request's own pages (the tree would take the prompt's)
    assert row["series"]["held"] == [3, 304 // 16, 304 // 16, 0]
    assert row["metrics"]["overlap_extra_reservations"] == 0  # its last output was a one-token-short exclusion


# Plain decode under overlap (not stale, frees one plan late): suites/unit/engine/test_plain_overlap.py.


def waiting_engine(overlap: str) -> tuple[Engine, list[int]]:
    """Two DFLASH requests (block 8, 1 accepted per verify) in a 15-page pool, the new-token
    ratio at its floor (a server that has decoded 600 steps): kvbench's estimate (SGLang's
    PrefillAdder counts these fixed-length requests at ratio 1.0 and takes one) admits both."""
    cfg = EngineConfig(spec="dflash", block_size=8, page_size=16, accept_len=1, max_context=512,
                       pool_tokens=15 * 16, overlap=overlap, prefix_cache="chunk",  # pages counted without a tree
                       admission="estimate")
    eng = Engine(cfg)
    eng.sched.ratio = eng.sched.rules.min
    waits: list[int] = []
    reserve = eng.sched.reserve_decode

    def spy(batch, *, wait=False, **kw):
        got = reserve(batch, wait=wait, **kw)
        if wait and got == []:
            waits.append(eng.step_no)
        return got

    eng.sched.reserve_decode = spy
    eng.submit([Request(0, PROMPT, 32), Request(1, list(range(1, 100)), 40)])
    return eng, waits


def test_waits_for_the_landing_frees_instead_of_retracting():
    """The plan of step 32 leaves request 0 out (one output short, its last verify in flight)
    and cannot reserve request 1's next page: SGLang's update_running_batch skips the decode
    step rather than retract, and the landing result frees request 0. The synchronous loop
    plans request 0's last verify with request 1's reservation and must retract one."""
    eng, waits = waiting_engine("on")
    res = eng.run()
    assert waits == [32]
    assert res.verdict == "ok" and res.stats["retractions"] == 0 and res.violations == {}
    sync, never = waiting_engine("off")
    off = sync.run()
    assert never == [] and off.stats["retractions"] == 1
    assert off.outputs == res.outputs


def test_knob_resolution_and_bad_values():
    assert PROFILES["sglang-0.5.23"].overlap and PROFILES["sglang-pre-35265"].overlap
    assert not PROFILES["host-aligned"].overlap and not PROFILES["floor-free"].overlap
    assert resolve("host-aligned", overlap="on").overlap
    assert not resolve("sglang-0.5.23", overlap="off").overlap
    assert not resolve("sglang-0.5.23", overlap=False).overlap  # a TOML bool
    assert EngineConfig(overlap=True).rules.overlap
    for bad in ("yes", 1, "ON"):
        with pytest.raises(ConfigError, match="overlap must be on or off"):
            EngineConfig(overlap=bad)
    # every algorithm runs overlapped; plain decode commits its token when it allocates
    assert Engine(EngineConfig(spec="eagle")).overlap and Engine(EngineConfig(spec="dflash")).overlap
    assert Engine(EngineConfig(spec="none")).overlap and Engine(EngineConfig(spec="none")).commit_at_alloc
    assert not Engine(EngineConfig(spec="dflash")).commit_at_alloc
    assert not Engine(EngineConfig(spec="dflash", overlap="off")).overlap


def test_trace_header_records_the_knob(tmp_path):
    path = tmp_path / "t.jsonl"
    run_config(dict(spec="dflash", num_requests=2, input_len=40, output_len=10, workload="fixed",
                    pool_tokens=4096), trace=str(path))
    head = json.loads(path.read_text().splitlines()[0])
    assert head["profile"]["overlap"] is True
    path2 = tmp_path / "t2.jsonl"
    run_config(dict(spec="dflash", num_requests=2, input_len=40, output_len=10, workload="fixed",
                    pool_tokens=4096, overlap="off"), trace=str(path2))
    assert json.loads(path2.read_text().splitlines()[0])["profile"]["overlap"] is False


def test_cli_bad_overlap_is_one_line_exit_2(tmp_path, capsys):
    from harness.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["run", "--overlap", "maybe"])
    assert exc.value.code == 2
    toml = tmp_path / "c.toml"
    toml.write_text('overlap = "sometimes"\n')
    capsys.readouterr()
    assert main(["run", "--config", str(toml)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "overlap must be on or off" in err[0]
