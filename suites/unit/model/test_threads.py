"""KVBENCH_THREADS: a fixed thread count, or one line naming what it allows."""

from __future__ import annotations

import pytest

from mini_engine.errors import ConfigError
from mini_engine.model.threads import ThreadChoice


@pytest.mark.parametrize("value", ["abc", "0", "-1", "1.5"])
def test_a_bad_thread_count_is_one_line(monkeypatch, value):
    monkeypatch.setenv("KVBENCH_THREADS", value)
    with pytest.raises(ConfigError, match="KVBENCH_THREADS must be a positive integer"):
        ThreadChoice()


def test_a_fixed_thread_count_is_kept(monkeypatch):
    monkeypatch.setenv("KVBENCH_THREADS", "1")
    assert ThreadChoice().fixed == 1
