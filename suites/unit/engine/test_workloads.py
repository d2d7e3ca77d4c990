"""Workloads: seeded shapes and --prompts files."""

from __future__ import annotations

import json

import pytest

from harness.core.errors import UsageError
from harness.core.workloads import WorkloadConfig, load_prompts, make_requests


def test_uniform_is_nano_vllm_shape_and_seeded():
    reqs = make_requests(WorkloadConfig(), seed=0)
    assert len(reqs) == 256
    assert all(100 <= len(r.prompt) <= 1024 and 100 <= r.max_new_tokens <= 1024 for r in reqs)
    again = make_requests(WorkloadConfig(), seed=0)
    assert [r.prompt for r in reqs] == [r.prompt for r in again]
    assert [r.prompt for r in reqs] != [r.prompt for r in make_requests(WorkloadConfig(), seed=1)]


def test_fixed_lognormal_pd():
    fixed = make_requests(WorkloadConfig(workload="fixed", num_requests=3, input_len=7, output_len=5), 0)
    assert [(len(r.prompt), r.max_new_tokens) for r in fixed] == [(7, 5)] * 3
    logn = make_requests(WorkloadConfig(workload="lognormal", num_requests=500, input_len=100, output_len=50), 0)
    lens = sorted(len(r.prompt) for r in logn)
    assert 1 <= lens[0] and lens[-1] <= 800 and lens[-1] > 3 * lens[250]  # long tail
    pd = make_requests(WorkloadConfig(workload="pd", num_requests=20, pd_fraction=0.5, arrival_gap=2), 0)
    arrived = [r for r in pd if r.fill_len]
    assert 0 < len(arrived) < 20 and all(r.fill_len == len(r.prompt) for r in arrived)
    assert all(r.arrival_step == 2 * r.rid for r in arrived)


@pytest.mark.parametrize("options, words", [
    ({"workload": "zipf"}, "workload must be one of fixed, uniform, lognormal, pd"),
    ({"num_requests": 0}, "num_requests must be an integer >= 1"),
    ({"pd_fraction": 2}, "pd_fraction must be a number in [0.0, 1.0]"),
])
def test_bad_workload(options, words):
    with pytest.raises(UsageError, match=words.replace("[", r"\[").replace("]", r"\]")):
        WorkloadConfig(**options)


def test_prompts_file(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text(json.dumps([1, 2, 3]) + "\n\n" + json.dumps({"prompt": [4, 5], "max_new_tokens": 9}) + "\n")
    reqs = load_prompts(str(p), default_output_len=7)
    assert [(r.prompt, r.max_new_tokens) for r in reqs] == [([1, 2, 3], 7), ([4, 5], 9)]
    for text, words in [("[1, -2]", "non-empty list of token ids"), ("{bad", "not valid JSON"),
                        ('{"prompt": [1], "n": 2}', "unknown key 'n'"), ("", "holds no prompts"),
                        ('{"prompt": [1], "max_new_tokens": 0}', "max_new_tokens must be"),
                        ('{"prompt": [1], "fill_len": true}', "fill_len must be 0 or the prompt length")]:
        p.write_text(text + "\n")
        with pytest.raises(UsageError, match=words):
            load_prompts(str(p), default_output_len=7)
    with pytest.raises(UsageError, match="prompts file '.*nope': not found"):
        load_prompts(str(tmp_path / "nope"), default_output_len=1)
