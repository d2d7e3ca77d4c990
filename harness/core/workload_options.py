"""The workload's options (``WORKLOAD``), declared as the engine declares its own
(``mini_engine.config.option``), and the names of the synthetic workloads.

Below both ``harness.core.workloads`` (whose ``WorkloadConfig`` is built from them) and
``harness.core.options`` (the whole schema, the engine's and these): neither has to
import the other to know a workload option.
"""

from __future__ import annotations

from mini_engine.config.option import Option

WORKLOADS = ("fixed", "uniform", "lognormal", "pd")
# Lengths and token ids stay int32-sized: far beyond any context, and numpy's draws
# (lognormal's log, integers' bounds) take them without overflow.
MOST = 2**31 - 1


def _workloads() -> tuple[str, ...]:
    return WORKLOADS


WORKLOAD = (
    Option("workload", str, "uniform", "synthetic workload", choices=_workloads, group="workload"),
    Option("num_requests", int, 256, "requests", short="n", minimum=1, maximum=MOST, group="workload"),
    Option("input_len", int, 1024, "prompt length (fixed) or its upper bound / median", short="in", minimum=1,
           maximum=MOST, group="workload"),
    Option("output_len", int, 1024, "output length (fixed) or its upper bound / median", short="out", minimum=1,
           maximum=MOST, group="workload"),
    Option("min_len", int, 100, "lower bound of the uniform lengths (above output_len: every output is output_len)",
           minimum=1, maximum=MOST, group="workload"),
    Option("sigma", float, 1.0, "shape of the lognormal lengths", minimum=0.0, maximum=10.0, group="workload"),
    Option("pd_fraction", float, 1.0, "share of pd requests that arrive prefilled", minimum=0.0, maximum=1.0,
           group="workload"),
    Option("arrival_gap", int, 0, "steps between PD arrivals", minimum=0, group="workload"),
    Option("prompt_vocab", int, 1024, "synthetic prompt ids are below this", minimum=2, maximum=MOST,
           group="workload"),
    Option("prompts", str, None, "JSON-lines prompts file in place of a synthetic workload", group="workload"),
    # Shared prompts (harness/core/prefixes.py, harness/core/turns.py): what a prefix cache can reuse.
    Option("shared_prefix", int, 0, "tokens of a system prompt every prompt starts with, before its own "
           "input_len-shaped part (0: none)", minimum=0, maximum=MOST, group="workload"),
    Option("prefix_groups", int, 1, "distinct shared prefixes, request i takes prefix i mod groups",
           minimum=1, maximum=MOST, group="workload"),
    Option("turns", int, 1, "turns per session: the next turn's prompt is this prompt + its output + new "
           "tokens, arriving when this turn finishes", minimum=1, maximum=MOST, group="workload"),
)

# The workloads a shape option means something for: given for another, it was ignored
# without a word (the user believed they measured something else). `kvbench run`
# refuses such a flag; a suite's [defaults] may set one for the configs it applies to.
APPLIES = {"sigma": ("lognormal",), "pd_fraction": ("pd",), "arrival_gap": ("pd",), "min_len": ("uniform", "pd")}
