"""The pool a "too small" refusal names is the smallest that passes the same check, and
one page less is refused (N17: the advice was a scaled guess that the SWA share's
rounding refused again, and it named the first too-large request, not the largest)."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mini_engine.config.engine_config import EngineConfig
from mini_engine.engine import Engine
from mini_engine.errors import ConfigError
from mini_engine.request import Request


def _refusal(options: dict, lens: list[tuple[int, int]]) -> int | None:
    """The pool_tokens a refusal names, or None if the workload is accepted."""
    reqs = [Request(rid=i, prompt=[1] * p, max_new_tokens=o) for i, (p, o) in enumerate(lens)]
    try:
        Engine(EngineConfig(**options)).validate(reqs)
    except ConfigError as err:
        found = re.search(r"raise pool_tokens to >= (\d+)", str(err))
        assert found, err
        return int(found.group(1))
    return None


CONFIGS = st.fixed_dictionaries({
    "page_size": st.sampled_from([1, 4, 16]),
    "spec": st.sampled_from(["none", "eagle", "dflash"]),
    "window": st.sampled_from([None, 32, 64]),
    "pool_tokens": st.integers(1, 64).map(lambda pages: pages * 16),
})
LENGTHS = st.lists(st.tuples(st.integers(1, 400), st.integers(1, 100)), min_size=1, max_size=4)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(options=CONFIGS, lens=LENGTHS)
def test_the_named_minimum_runs_and_one_page_less_is_refused(options, lens):
    named = _refusal(options, lens)
    if named is None:
        return
    ps = options["page_size"]
    assert named % ps == 0
    assert _refusal({**options, "pool_tokens": named}, lens) is None, "the named minimum is refused again"
    if named > ps:
        assert _refusal({**options, "pool_tokens": named - ps}, lens) is not None, "one page less also runs"


@pytest.mark.parametrize("options", [{"window": 64, "spec": "dflash"}, {"spec": "eagle", "page_size": 16}])
def test_one_refusal_is_enough(options):
    lens = [(50, 10), (200, 50), (120, 40), (300, 50)]
    named = _refusal({**options, "pool_tokens": 16}, lens)
    assert named is not None and _refusal({**options, "pool_tokens": named}, lens) is None
