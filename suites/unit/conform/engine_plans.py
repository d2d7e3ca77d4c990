"""The decode plans a kvbench engine makes: (committed, allocated) of every request each
time the memory layer prepares a decode batch, for the overlap tests against SGLang
(0.5.23's and 0.5.18's overlap loops)."""

from __future__ import annotations

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.request import Request


def run_plans(cfg: EngineConfig, prompts, max_news):
    """Run requests of those prompt lengths and output limits; (plans, stats) of a clean run."""
    eng = Engine(cfg)
    eng.submit([Request(i, list(range(1, p + 1)), n) for i, (p, n) in enumerate(zip(prompts, max_news))])
    plans, prepare = [], eng.manager.prepare

    def recording(states, reserve, **kw):
        ok = prepare(states, reserve, **kw)
        plans.append([(int(s.committed), int(s.allocated)) for s in states])
        return ok

    eng.manager.prepare = recording
    res = eng.run()
    assert res.verdict == "ok" and res.violations == {}
    return plans, res.stats
