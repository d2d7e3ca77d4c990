"""kvbench conform: engine traces conform to SGLang 0.5.23; a planted off-by-one fails;
a missing SGLang or an unreadable trace is one line and exit 2."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.cli import main

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((ROOT / "examples").glob("*.jsonl"))
SMALL = ["--num-requests", "16", "--workload", "uniform", "--input-len", "120", "--min-len", "20",
         "--output-len", "48", "--max-running", "6", "--chunked-prefill", "256"]

# A handful of engine configs: both spec algorithms, plain decode, ps 1 / 16 / 64, SWA, PD,
# both free policies, and pools small enough that pages are recycled (the order matters).
CONFIGS = {
    "dflash-ps16": ["--spec", "dflash", "--block-size", "16", "--page-size", "16", "--pool-tokens", "1536"],
    "dflash-ps1-unaligned": ["--spec", "dflash", "--block-size", "8", "--page-size", "1",
                             "--pool-tokens", "768", "--policy", "unaligned"],
    "dflash-ps64-dedup": ["--spec", "dflash", "--block-size", "16", "--page-size", "64",
                          "--pool-tokens", "4096", "--free", "dedup"],
    "eagle-tree-ps64": ["--spec", "eagle", "--topk", "2", "--steps", "3", "--num-draft-tokens", "4",
                        "--page-size", "64", "--pool-tokens", "4096"],
    "plain-ps16-unaligned": ["--spec", "none", "--page-size", "16", "--pool-tokens", "768",
                             "--policy", "unaligned"],
    "dflash-swa32": ["--spec", "dflash", "--block-size", "16", "--page-size", "16", "--pool-tokens", "1536",
                     "--window", "32", "--layer-pattern", "3:1"],
    "eagle-swa-pd": ["--spec", "eagle", "--topk", "1", "--steps", "3", "--num-draft-tokens", "4",
                     "--page-size", "16", "--pool-tokens", "1536", "--window", "32", "--layer-pattern", "1:1",
                     "--workload", "pd"],
}


def record(tmp_path, name: str, capsys) -> Path:
    path = tmp_path / f"{name}.jsonl"
    main(["run", *SMALL, *CONFIGS[name], "--trace", str(path)])  # exit 1 is fine: a leak is data here
    capsys.readouterr()
    return path


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    path = tmp_path_factory.mktemp("conform") / "dflash.jsonl"
    main(["run", *SMALL, *CONFIGS["dflash-swa32"], "--trace", str(path)])
    return path


def conform_cli(capsys, *paths) -> tuple[int, str, str]:
    rc = main(["conform", *map(str, paths)])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_committed_examples_conform(sg, capsys, path):
    from harness.conform.versions import trace_version

    want = trace_version(str(path), json.loads(path.read_text().splitlines()[0]))
    if want not in (None, sg.version):  # conform refuses it here (test_conform_versions)
        pytest.skip(f"{path.name} is an SGLang {want} trace; test_sglang_0518 conforms it there")
    rc, out, _ = conform_cli(capsys, path)
    assert rc == 0, out


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_engine_traces_conform(sg, tmp_path, capsys, name):
    path = record(tmp_path, name, capsys)
    rc, out, err = conform_cli(capsys, path)
    assert rc == 0 and err == "", out + err
    assert f"{path}: conforms to sglang" in out
    calls = int(out.split("(")[1].split(" calls")[0])
    assert calls == sum(1 for _ in open(path)) - 1 > 20


PD = ["--workload", "pd", "--spec", "eagle", "--topk", "1", "--steps", "3", "--num-draft-tokens", "4",
      "--pool-tokens", "1536", "--window", "32", "--layer-pattern", "1:1"]


@pytest.mark.parametrize("ps", ["16", "64"])
def test_pd_traces_with_need_sort_conform(sg, tmp_path, capsys, monkeypatch, ps):
    # SGLang's PD decode side stages frees and merges them sorted (need_sort): build the
    # engine's allocators that way and the staged order must match SGLang's too.
    import functools

    from mini_engine.memory.pool.allocator import PagedAllocator

    staged = functools.partial(PagedAllocator, need_sort=True)
    monkeypatch.setattr("mini_engine.memory.manager.PagedAllocator", staged)
    monkeypatch.setattr("mini_engine.memory.pool.swa.PagedAllocator", staged)
    path = tmp_path / "pd.jsonl"
    main(["run", *SMALL, *PD, "--page-size", ps, "--trace", str(path)])
    capsys.readouterr()
    assert '"need_sort":true' in path.read_text()
    rc, out, _ = conform_cli(capsys, path)
    assert rc == 0, out


def test_pd_trace_at_page_size_1_conforms(sg, tmp_path, capsys):
    # SGLang 0.5.23 takes no SWA tail path at ps 1 (the whole fill gets SWA slots): no swa_prealloc record.
    path = tmp_path / "pd1.jsonl"
    main(["run", *SMALL, *PD, "--page-size", "1", "--trace", str(path)])
    capsys.readouterr()
    assert '"op":"swa_prealloc"' not in path.read_text()
    rc, out, _ = conform_cli(capsys, path)
    assert rc == 0, out


def plant(src: Path, dst: Path, edit) -> int:
    """Copy a trace, apply edit(record) -> bool to the first record it accepts; its call index."""
    lines = src.read_text().splitlines()
    for i, line in enumerate(lines[1:], start=1):
        rec = json.loads(line)
        if edit(rec):
            lines[i] = json.dumps(rec)
            dst.write_text("\n".join(lines) + "\n")
            return i
    raise AssertionError("nothing to plant on")


def _late_out(rec):
    if rec["op"] == "alloc_extend" and rec["out"] and rec["out"][0] and rec["prefix_lens"][0] > 0:
        rec["out"][0][-1] += 1
        return True
    return False


def _available(rec):
    if rec["op"] in ("free", "free_pages"):
        rec["available"] -= 1
        return True
    return False


def _nxt(rec):
    if rec["op"] == "prepare" and rec["reqs"]:
        rec["reqs"][-1]["nxt"] += 1
        return True
    return False


def _reserve(rec):
    if rec["op"] == "prepare":
        rec["reserve"] += 1
        return True
    return False


def _swa_tail(rec):
    if rec["op"] == "swa_prealloc":
        rec["tail"] += 1
        return True
    return False


@pytest.mark.parametrize("edit, field", [(_late_out, "out[0]"), (_available, "available"),
                                         (_nxt, ".nxt"), (_reserve, "reserve")])
def test_planted_off_by_one_fails(sg, recorded, tmp_path, capsys, edit, field):
    bad = tmp_path / "planted.jsonl"
    call = plant(recorded, bad, edit)
    rc, out, err = conform_cli(capsys, bad)
    assert rc == 1 and err == ""
    assert f"diverges from sglang" in out and f"at call {call} (line {call + 1})" in out and field in out


def test_planted_swa_tail_fails(sg, tmp_path, capsys):
    src = record(tmp_path, "eagle-swa-pd", capsys)
    bad = tmp_path / "planted.jsonl"
    call = plant(src, bad, _swa_tail)
    rc, out, _ = conform_cli(capsys, bad)
    assert rc == 1 and f"at call {call} " in out and "tail" in out


@pytest.mark.parametrize("pd_radix, tail", [(False, 32), (True, 48)])
def test_swa_tail_rule_with_and_without_the_decode_radix_cache(sg, tmp_path, capsys, pd_radix, tail):
    # fill 64, window 32, ps 16: floor_16(64 - 32) = 32 -> tail 32; with the decode-side
    # radix cache floor_16(64 - 1 - max(32, 16)) = 16 -> tail 48 (the worked number).
    fill = 64
    head = {"format": "kvbench-trace", "version": 1, "page_size": 16, "num_pages": 8,
            "swa_num_pages": 8, "profile": {"pd_radix": pd_radix}}
    rec = {"op": "swa_prealloc", "fill_len": fill, "window": 32, "tail": tail, "evicted": fill - tail}
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(head) + "\n" + json.dumps(rec) + "\n")
    assert conform_cli(capsys, path)[0] == 0
    head["profile"]["pd_radix"] = not pd_radix
    path.write_text(json.dumps(head) + "\n" + json.dumps(rec) + "\n")
    rc, out, _ = conform_cli(capsys, path)
    assert rc == 1 and "tail" in out


def test_good_then_planted_reports_both(sg, recorded, tmp_path, capsys):
    bad = tmp_path / "planted.jsonl"
    plant(recorded, bad, _available)
    rc, out, _ = conform_cli(capsys, recorded, bad)
    lines = out.splitlines()
    assert rc == 1 and len(lines) == 2 and "conforms" in lines[0] and "diverges" in lines[1]


def test_missing_sglang_is_one_line_exit_2(monkeypatch, tmp_path, capsys):
    # A None entry in sys.modules makes the import fail as if the package were absent.
    monkeypatch.setitem(sys.modules, "sglang.srt.mem_cache.allocator.paged", None)
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"format": "kvbench-trace", "version": 1, "page_size": 16, "num_pages": 4}\n')
    rc, out, err = conform_cli(capsys, trace)
    assert rc == 2 and out == ""
    assert len(err.splitlines()) == 1 and "pip install --no-deps sglang==0.5.23" in err
    assert "Traceback" not in err


HEADER = '{"format": "kvbench-trace", "version": 1, "page_size": 16, "num_pages": 4}'


@pytest.mark.parametrize("text, words", [
    (None, "t.jsonl': not found"),
    ("", "is empty"),
    ("not json\n", "line 1 is not JSON"),
    ('{"format": "other"}\n', "not a kvbench-trace header"),
    ('{"format": "kvbench-trace", "version": 99, "page_size": 16, "num_pages": 4}\n', "version 99"),
    (HEADER + '\n{"op": "defrag"}\n', "unknown op 'defrag'"),
    (HEADER + '\n{"op": "prepare", "reserve": 8, "reqs": []}\n', '"aligned": true|false'),
    (HEADER + '\n{"op": "free_pages", "page_ids": [1], "available": 64, "decode": 1}\n',
     "decode must be true or false"),
    (HEADER + '\n{"op": "free_pages", "page_ids": [1], "available": 64, "need_sort": true}'
              '\n{"op": "free_pages", "page_ids": [2], "available": 64}\n', "one pool has one order"),
    (HEADER + '\n{"op": "free_pages", "pool": "swa", "page_ids": [1], "available": 64}\n',
     "which the header does not define"),
    (HEADER + '\n{"op": "prepare", "aligned": true, "reserve": 8, "reqs": [{"cur": 1}]}\n', "malformed"),
    ('{"format": "kvbench-trace", "version": 1, "page_size": 16, "num_pages": 4, "profile": 3}\n',
     "profile must be an object"),
])
def test_bad_trace_is_one_line_exit_2(monkeypatch, tmp_path, capsys, text, words):
    # The trace is refused before SGLang is used, so a stand-in keeps this test everywhere.
    monkeypatch.setattr("harness.conform.check.load_sglang", lambda: _FakeSGLang())
    path = tmp_path / "t.jsonl"
    if text is not None:
        path.write_text(text)
    rc, out, err = conform_cli(capsys, path)
    assert rc == 2 and out == "" and "Traceback" not in err
    assert len(err.splitlines()) == 1 and err.startswith("kvbench: error: ") and words in err, err


class _FakeSGLang(SimpleNamespace):
    """Enough of load_sglang()'s namespace for a trace that fails before any SGLang call."""

    version = "stand-in"

    def __init__(self):
        import torch

        alloc = SimpleNamespace(available_size=lambda: 64, free_page_ids=lambda ids: None)
        ctor = SimpleNamespace(PagedTokenToKVPoolAllocator=lambda *a: alloc)
        sizing = SimpleNamespace(get_alloc_len_per_decode=lambda: 1, get_alloc_reserve_per_decode=lambda: 2,
                                 get_spec=None, get_schedule=None, get_parallel=None,
                                 max_speculative_num_draft_tokens=None)
        super().__init__(torch=torch, paged=ctor, token=None, sizing=sizing, spec_info=None)


def grouped_trace(path, ps: int, seed: int) -> None:
    """A manager trace whose releases and SWA evictions of a step share one free group
    per pool, as SGLang's batch result processing does."""
    import random

    from mini_engine.memory.audit.record import Auditor
    from mini_engine.memory.config import MemoryConfig
    from mini_engine.memory.manager import KVManager
    from mini_engine.memory.trace.writer import TraceWriter

    mem = MemoryConfig(ps, 48, 6, 600, policy="unaligned", free_policy="segment",
                       swa_num_pages=48, window=40)
    rng = random.Random(seed)
    with TraceWriter.for_memory(path, mem, {"seed": seed}) as trace:
        m = KVManager(mem, Auditor("record"), trace)
        pools = [m.full, m.swa.allocator]
        live = []
        for step in range(120):
            r = rng.random()
            if r < 0.3 and m.num_free_rows:
                s = m.admit(step)
                n = rng.randint(1, 90)
                if m.extend(s, n):
                    m.commit(s, n)
                    live.append(s)
                else:
                    m.release(s)
            elif r < 0.75 and live:
                if m.prepare(live, 24, algo="dflash"):
                    for a in pools:
                        a.free_group_begin()
                    for s in live:
                        m.commit(s, rng.randint(1, 12))
                        m.evict_swa(s)
                    for _ in range(rng.randint(0, 2)):
                        if live:
                            m.release(live.pop(rng.randrange(len(live))))
                    for a in pools:
                        a.free_group_end()
            elif live:
                m.release(live.pop(rng.randrange(len(live))))
        for s in live:
            m.release(s)


@pytest.mark.parametrize("ps", [1, 16])
def test_free_group_manager_trace_conforms(sg, tmp_path, capsys, ps):
    from mini_engine.algos import writers
    from mini_engine.memory.replay.run import replay

    path = tmp_path / "grouped.jsonl"
    grouped_trace(path, ps, seed=ps)
    assert replay(path, writers()).divergences == 0
    rc, out, _ = conform_cli(capsys, path)
    assert rc == 0, out
