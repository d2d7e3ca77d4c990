"""scripts/measure_speed.py's round loop (its children and timings stubbed: the real ones
run models for minutes): every checkout runs once a round, in alternating order, and each
checkout's rounds reach its report."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "measure_speed.py"


def _script():
    spec = importlib.util.spec_from_file_location("measure_speed_under_test", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_rounds_interleave_the_checkouts_and_reach_the_reports(monkeypatch, tmp_path):
    ms = _script()
    base = tmp_path / "base"
    (base / "harness").mkdir(parents=True)
    order, reports = [], {}
    monkeypatch.setattr(ms, "write_inputs", lambda root: (root / "ckpt", {}))
    monkeypatch.setattr(ms, "run_child", lambda path, ckpt, files, results: order.append(path) or {"tok_s": 1.0})
    monkeypatch.setattr(ms, "timed", lambda cmd, path, results: (2.0, 0))
    monkeypatch.setattr(ms, "report", lambda name, rounds: reports.setdefault(name.split(":")[0], rounds) and {})
    monkeypatch.setattr(sys, "argv", ["measure_speed.py", "--base", str(base), "--rounds", "3"])
    assert ms.main() == 0
    assert order == [base.resolve(), ms.HERE, ms.HERE, base.resolve(), base.resolve(), ms.HERE]
    assert {k: len(v) for k, v in reports.items()} == {"base": 3, "head": 3}
    assert all(r["smoke_s"] == 2.0 for v in reports.values() for r in v)


def test_the_report_takes_hf_thread_counts_that_differ_between_rounds(capsys):
    # kvbench's thread choice can differ by round, so one round times HF at 1 and 2 threads
    # and another at 2 alone (a KeyError stopped the report once).
    ms = _script()
    steps = {k: {"step_ms": 1.0, "tau": 1.0} for k in ("plain", "eagle-chain", "dflash")}

    def rnd(hf, threads):
        return {"default_threads": 2, "steps": steps,
                **{f"b{b}": {"kvbench": 10.0, "kvbench_threads": threads, "hf": hf, "ratio": 1.5, "equal": b}
                   for b in ms.BATCHES}}

    summary = ms.report("head", [rnd({"1": 8.0, "2": 6.0}, 1), rnd({"2": 7.0}, 2), rnd({"1": 9.0, "2": 5.0}, 1)])
    assert summary["vs_hf_b64"] == 1.5
    out = capsys.readouterr().out
    assert "hf@1thr=8 hf@2thr=6" in out and "threads 1/2/1" in out
