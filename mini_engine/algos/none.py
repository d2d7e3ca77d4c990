"""Plain decoding: one token per step, a one-slot reservation."""

from __future__ import annotations

from mini_engine.algos.base import Algorithm


class Plain(Algorithm):
    name = "none"
