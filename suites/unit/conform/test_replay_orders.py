"""kvbench replay with SGLang's free-list order: staged (need_sort) traces, decode records,
and the newer trace fields (header profile, "aligned" on prepare). No SGLang needed."""

from __future__ import annotations

import functools
import json

import pytest

from harness.cli import main
from mini_engine.memory.pool.allocator import PagedAllocator
from mini_engine.algos import writers
from mini_engine.memory.replay.run import replay
from mini_engine.memory.trace.writer import TraceWriter


def test_staged_engine_trace_replays_and_a_reorder_is_caught(tmp_path, capsys, monkeypatch):
    staged = functools.partial(PagedAllocator, need_sort=True)
    monkeypatch.setattr("mini_engine.memory.manager.PagedAllocator", staged)
    monkeypatch.setattr("mini_engine.memory.pool.swa.PagedAllocator", staged)
    path = tmp_path / "pd.jsonl"
    main(["run", "--workload", "pd", "--num-requests", "16", "--input-len", "120", "--output-len", "40",
          "--max-running", "6", "--spec", "dflash", "--pool-tokens", "1024", "--window", "32",
          "--layer-pattern", "1:1", "--trace", str(path)])
    capsys.readouterr()
    assert replay(path, writers()).divergences == 0
    # Drop the need_sort marks: the same frees now go in front of the list (LIFO), so the
    # first allocation after a free that SGLang would not have merged yet gets other pages.
    lines = path.read_text().splitlines()
    path.write_text("\n".join(line.replace(',"need_sort":true', "") for line in lines) + "\n")
    rep = replay(path, writers())
    assert rep.divergences > 0 and rep.first_divergence.field == "out"


def write(tmp_path, records, **head):
    path = tmp_path / "t.jsonl"
    with TraceWriter(path, {"page_size": 4, "num_pages": 8, **head}) as t:
        for r in records:
            t.write(r)
    return path


def test_prepare_aligned_field_and_profile_header(tmp_path):
    prep = {"op": "prepare", "algo": "dflash", "reserve": 8,
            "reqs": [{"rid": 0, "committed": 5, "cur": 6, "nxt": 16}]}  # ceil_4(13) = 16
    unaligned = dict(prep, aligned=False, reqs=[dict(prep["reqs"][0], nxt=13)])  # 5 + 8
    path = write(tmp_path, [dict(prep, aligned=True), unaligned],
                 profile={"name": "sglang-0.5.23", "pd_radix": False})
    assert replay(path, writers()).divergences == 0
    bad = write(tmp_path, [dict(prep, aligned=False)])  # unaligned gives 13, not 16
    d = replay(bad, writers()).first_divergence
    assert (d.field, d.expected, d.got) == ("reqs[0].nxt", 16, 13)


def test_decode_record_replays_with_decodes_merge_test(tmp_path, capsys):
    a = PagedAllocator(6, 4, need_sort=True)
    path = tmp_path / "d.jsonl"
    with TraceWriter(path, {"page_size": 4, "num_pages": 6}) as t:
        a.trace = t
        a.alloc_extend([0, 0, 0], [4, 4, 4], [-1, -1, -1])
        a.free_pages([2])
        a.alloc_decode([5, 5, 5], [7, 11, 15])  # no merge for a decode: pages 4, 5, 6
    assert replay(path, writers()).divergences == 0
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    recs[3].pop("decode")  # as an extend the same call merges first and takes page 2
    path.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    assert replay(path, writers()).first_divergence.field == "out"
    assert main(["replay", str(path)]) == 1
    assert "call 3 (line 4) alloc_extend: out expected" in capsys.readouterr().out


@pytest.mark.parametrize("record, words", [
    ({"op": "prepare", "reserve": 8, "reqs": []}, '"aligned": true|false'),
    ({"op": "prepare", "aligned": "yes", "reserve": 8, "reqs": []}, "aligned must be true or false"),
    ({"op": "alloc_extend", "prefix_lens": [0], "seq_lens": [1], "last_locs": [-1], "out": None,
      "available": 28, "decode": "no"}, "decode must be true or false"),
])
def test_bad_new_fields_are_one_line_exit_2(tmp_path, capsys, record, words):
    path = write(tmp_path, [record])
    assert main(["replay", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and words in err
