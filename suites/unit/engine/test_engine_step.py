"""step() and tick() say what they did with a StepOutcome: RAN, STALLED, EXHAUSTED, IDLE."""

from __future__ import annotations

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine, StepOutcome
from mini_engine.request import Request


def drive(engine: Engine) -> list[StepOutcome]:
    """Tick until the engine idles or its pool is exhausted."""
    outcomes = []
    while not outcomes or outcomes[-1] not in (StepOutcome.IDLE, StepOutcome.EXHAUSTED):
        outcomes.append(engine.tick())
    return outcomes


def test_a_run_ticks_ran_until_idle():
    engine = Engine(EngineConfig(pool_tokens=4096, overlap="off"))  # overlapped, the last result lands in a 5th step
    assert engine.tick() is StepOutcome.IDLE and engine.step_no == 0  # nothing submitted: no step ran
    engine.submit([Request(rid=i, prompt=[1, 2, 3], max_new_tokens=4) for i in range(2)])
    outcomes = drive(engine)
    # One prefill step, then three decode steps (the prefill gave each request its first token).
    assert outcomes == [StepOutcome.RAN] * 4 + [StepOutcome.IDLE]
    assert engine.step_no == engine.stats.steps == 4
    assert all(len(r.outputs) == 4 for r in engine.requests)


def test_idle_time_jumps_to_the_next_arrival():
    engine = Engine(EngineConfig(pool_tokens=4096))
    engine.submit([Request(rid=0, prompt=[1, 2], max_new_tokens=1, arrival_step=50)])
    assert engine.tick() is StepOutcome.RAN and engine.step_no == 51
    # Under overlap (the profile's default) the prefill's result, its one output, lands in a
    # step of its own, after the next pass found nothing to run (SGLang's event_loop_overlap).
    assert not engine.requests[0].outputs
    assert engine.tick() is StepOutcome.RAN and engine.step_no == 52 and engine.requests[0].outputs
    assert engine.tick() is StepOutcome.IDLE


def test_leaks_end_in_exhausted():
    # ps 64, unaligned extents under floor free: one page leaks per request until nothing fits.
    cfg = EngineConfig(spec="dflash", page_size=64, block_size=16, accept_len=5, pool_tokens=64 * 20,
                       policy="unaligned", free_policy="floor", max_running=4)
    engine = Engine(cfg)
    engine.submit([Request(rid=i, prompt=list(range(37)), max_new_tokens=11) for i in range(40)])
    outcomes = drive(engine)
    assert outcomes[-1] is StepOutcome.EXHAUSTED and set(outcomes[:-1]) == {StepOutcome.RAN}
    assert engine.manager.leaked_pages() > 0


def test_a_decode_batch_retracted_whole_is_stalled_and_the_step_counts(monkeypatch):
    # Overlap off: under overlap the prefill's result is still in flight, and its landing is progress.
    engine = Engine(EngineConfig(pool_tokens=4096, overlap=False))
    engine.submit([Request(rid=0, prompt=[1, 2, 3], max_new_tokens=4)])
    assert engine.tick() is StepOutcome.RAN  # the prefill
    monkeypatch.setattr(engine.sched, "reserve_decode", lambda batch, wait=False, lag=None: [])
    assert engine.tick() is StepOutcome.STALLED and engine.step_no == 2 and engine.stats.steps == 2
    monkeypatch.setattr(engine.sched, "reserve_decode", lambda batch, wait=False, lag=None: None)
    assert engine.tick() is StepOutcome.EXHAUSTED and engine.step_no == 2  # an exhausted step is not counted


def test_run_gives_up_on_a_run_that_only_stalls(monkeypatch):
    engine = Engine(EngineConfig(pool_tokens=4096, max_running=2))
    engine.submit([Request(rid=0, prompt=[1, 2, 3], max_new_tokens=4)])
    assert engine.tick() is StepOutcome.RAN
    monkeypatch.setattr(engine.sched, "reserve_decode", lambda batch, wait=False, lag=None: [])
    result = engine.run()
    assert result.verdict == "pool_exhausted" and result.error == "no progress for 13 steps"  # 2 * 2 + 8, then one more
