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
