"""NGRAM as SGLang 0.5.23 sizes it: worked reserves, the EAGLE writer's alignment, the
accepted-length bound, and every reservation of a run checked by SGLang's own code."""

from __future__ import annotations

import pytest

from harness.run.runner import run_config
from mini_engine.config.engine_config import EngineConfig
from mini_engine.errors import ConfigError
from mini_engine.memory import sizing

SMALL = dict(num_requests=12, input_len=120, min_len=20, output_len=48, max_running=6, pool_tokens=4096)


def test_sglang_defaults_and_the_reserve_has_no_per_topk_page_rounding():
    cfg = EngineConfig(spec="ngram")
    assert (cfg.topk, cfg.num_draft_tokens, cfg.steps) == (10, 12, 1)  # breadth 10, 12 tokens, 12 // 10
    assert cfg.step_reserve == 24 and cfg.max_accept == 12  # 2 * max(1 * 10, 12)
    # ps 16, topk 4, steps 3, ndt 8: 2 * max(12, 8) = 24; EAGLE rounds each branch to a page: 256.
    ng = EngineConfig(spec="ngram", page_size=16, topk=4, steps=3, num_draft_tokens=8)
    assert ng.step_reserve == 24
    assert EngineConfig(spec="eagle", page_size=16, topk=4, steps=3, num_draft_tokens=8).step_reserve == 256
    assert sizing.eagle_reserve(16, 4, 3, 8) == 256
    # steps defaults to num_draft_tokens // topk, read as 1 when that is 0 (SGLang's `or 1`).
    assert EngineConfig(spec="ngram", topk=8, num_draft_tokens=20).steps == 2
    assert EngineConfig(spec="ngram", topk=16, num_draft_tokens=8).steps == 1


def test_row_headroom_is_sglangs():
    cfg = EngineConfig(spec="ngram", page_size=16)  # max(4 + 12, 24 + 15)
    assert cfg.algo.row_headroom(cfg, "sglang") == 39
    cfg = EngineConfig(spec="ngram", page_size=1)  # ps 1: 4 + num_draft_tokens only
    assert cfg.algo.row_headroom(cfg, "sglang") == 16


@pytest.mark.parametrize("bad, message", [
    (dict(model="tiny"), "spec=ngram is accounting-only"),
    (dict(num_draft_tokens=1), "num_draft_tokens must be an integer >= 2"),
    (dict(topk=0), "topk must be an integer >= 1"),
    (dict(block_size=4), "block_size applies to spec=dflash only"),
])
def test_bad_input_is_one_line(bad, message):
    with pytest.raises(ConfigError, match=message):
        EngineConfig(spec="ngram", **bad)


@pytest.mark.parametrize("profile, aligned", [("sglang-0.5.23", True), ("sglang-pre-35265", True),
                                              ("floor-free", True), ("host-aligned", True)])
def test_planned_by_eagles_writer_in_every_profile(tmp_path, profile, aligned):
    import json

    trace = tmp_path / "t.jsonl"
    row = run_config(dict(spec="ngram", page_size=16, profile=profile, **SMALL), trace=str(trace))
    assert row["status"] == "ok" and row["metrics"]["leaked_pages"] == 0 and row["violations"] == {}
    assert row["key"].startswith("spec=ngram,ps=16,topk=10,steps=1,ndt=12,")
    preps = [r for r in map(json.loads, trace.read_text().splitlines()[1:]) if r["op"] == "prepare"]
    assert preps and all(r["algo"] == "eagle" and r["aligned"] is aligned and r["reserve"] == 24 for r in preps)
    assert 1 <= row["metrics"]["tau"] <= 12


def test_align_knob_without_eagle_leaves_it_unaligned(tmp_path):
    import json

    trace = tmp_path / "t.jsonl"
    row = run_config(dict(spec="ngram", page_size=16, profile="sglang-pre-35265", align="extend", **SMALL),
                     trace=str(trace))
    assert row["status"] in ("ok", "violated")
    preps = [r for r in map(json.loads, trace.read_text().splitlines()[1:]) if r["op"] == "prepare"]
    assert all(q["nxt"] == max(q["cur"], q["committed"] + 24) for r in preps for q in r["reqs"])
    assert row["metrics"]["peak_stranded_slots_spec"] > 0


@pytest.mark.parametrize("options", [
    dict(page_size=16),
    dict(page_size=64, topk=4, steps=3, num_draft_tokens=8),
    dict(page_size=1, topk=2, num_draft_tokens=6),
    dict(page_size=16, window=32, layer_pattern="1:1", workload="pd"),
])
def test_every_reservation_is_sglangs(tmp_path, options):
    conform = pytest.importorskip("harness.conform.check")
    from harness.conform.versions import SGLangMissing

    try:
        sg = conform.load_sglang()
    except SGLangMissing as err:
        pytest.skip(str(err))
    trace = tmp_path / "t.jsonl"
    row = run_config(dict(spec="ngram", **{**SMALL, "pool_tokens": 2048}, **options), trace=str(trace))
    assert row["status"] == "ok"
    report = conform.conform(trace, sg)
    assert report.conforms, conform.describe(report.first_divergence)
    assert report.reserves > 0  # SGLang's own get_alloc_reserve_per_decode for NGRAM was asked
