"""Seeded synthetic workloads and --prompts files, as lists of Requests.

* fixed:     every request has input_len prompt tokens and output_len new tokens.
* uniform:   nano-vllm's benchmark shape: input and output lengths uniform in
             [min_len, input_len] and [min_len, output_len] (defaults 100..1024); a
             min_len above output_len makes every output output_len (prompts of one
             range, outputs of one length), above input_len it is refused (check_given).
* lognormal: long-tailed lengths with medians input_len / output_len and shape
             sigma, clipped to [1, 8 x median]: a few very long requests among many short.
* pd:        the uniform shape, but a pd_fraction of the requests arrive already
             prefilled (fill_len = prompt length), as on the decode node of PD
             disaggregation, staggered over the first steps.

Any synthetic shape can share prompts: shared_prefix / prefix_groups put a system
prompt before each prompt's own part (harness/core/prefixes.py), turns makes each request
a session whose next turn extends the finished one (harness/core/turns.py). A --prompts
file shares whatever prefixes its prompts share.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from harness.core.errors import UsageError
from harness.core.lengths import draw_lengths
from harness.core.prefixes import check_sharing, group_of, prefixes
from harness.core.turns import later_turns
from harness.core.workload_options import MOST, WORKLOAD, WORKLOADS
from mini_engine.errors import ConfigError, check_choice, check_positive
from mini_engine.files import failure, read_document
from mini_engine.config.option import Option, dataclass_from
from mini_engine.request import Request, check_context

if TYPE_CHECKING:  # annotations only: building the CLI parser imports no numpy (nor the engine)
    from mini_engine.scheduler.sessions import NextTurn

def _workload_options() -> tuple[Option, ...]:
    return WORKLOAD


@dataclass_from(_workload_options)
class WorkloadConfig:
    """Every option of harness.core.options.WORKLOAD is a field (workload, num_requests, ...),
    declared there once with its type, default, help and bounds."""

    def __post_init__(self) -> None:
        try:
            self._check()
        except ConfigError as err:  # the engine's option checks, here on the harness's options
            raise UsageError(str(err)) from None

    def _check(self) -> None:
        check_choice("workload", self.workload, WORKLOADS)
        for name in ("num_requests", "input_len", "output_len", "min_len", "prompt_vocab"):
            value = check_positive(name, getattr(self, name), minimum=2 if name == "prompt_vocab" else 1)
            if value > MOST:
                raise UsageError(f"{name} must be an integer <= {MOST} (got {value})")
        check_positive("arrival_gap", self.arrival_gap, minimum=0)
        for name, low in (("shared_prefix", 0), ("prefix_groups", 1), ("turns", 1)):
            if check_positive(name, getattr(self, name), minimum=low) > MOST:
                raise UsageError(f"{name} must be an integer <= {MOST} (got {getattr(self, name)})")
        if self.prompts is not None:
            if not isinstance(self.prompts, str):
                raise UsageError(f"prompts must be the path of a JSON-lines file (got {self.prompts!r})")
            # The file gives the requests; a synthetic shape set beside it would be ignored.
            for f in dataclasses.fields(self):
                if f.name not in ("prompts", "output_len") and getattr(self, f.name) != f.default:
                    raise UsageError(f"{f.name} shapes a synthetic workload and does not apply with prompts; "
                                     f"drop {f.name} or prompts")
        for name, low, high in (("sigma", 0.0, 10.0), ("pd_fraction", 0.0, 1.0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not low <= v <= high:
                raise UsageError(f"{name} must be a number in [{low}, {high}] (got {v!r})")
        check_sharing(self)

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        return tuple(cls.__dataclass_fields__)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Workload:
    requests: list[Request]  # what arrives by itself: every request, or each session's first turn
    next_turns: dict[int, NextTurn]  # rid -> the turn submitted when it finishes (harness/core/turns.py)


def make_requests(wl: WorkloadConfig, seed: int, *, max_context: int | None = None) -> list[Request]:
    """The requests that arrive by themselves (each session's first turn: see make_workload)."""
    return make_workload(wl, seed, max_context=max_context).requests


def make_workload(wl: WorkloadConfig, seed: int, *, max_context: int | None = None) -> Workload:
    """The workload's requests and later turns; with max_context, a request longer than it
    is bad input, found before its prompt is drawn (a huge length must not be allocated first)."""
    import numpy as np  # numpy: here, not at the top: the CLI imports WORKLOADS to build its parser

    if wl.prompts is not None:
        return Workload(load_prompts(wl.prompts, default_output_len=wl.output_len), {})
    rng = np.random.default_rng([seed, 0x3017])  # own stream: the engine's seed keys tokens
    n = wl.num_requests
    ins, outs, later = _lengths(wl, seed, rng, max_context)
    pd = np.zeros(n, dtype=bool)
    if wl.workload == "pd":
        pd = rng.random(n) < wl.pd_fraction
    heads = prefixes(wl, seed)
    reqs = []
    for i in range(n):
        own = rng.integers(0, wl.prompt_vocab, int(ins[i])).tolist()
        prompt = [*heads[group_of(i, len(heads))], *own] if heads else own
        fill = len(prompt) if pd[i] else 0
        arrival = i * wl.arrival_gap if pd[i] else 0
        reqs.append(Request(rid=i, prompt=prompt, max_new_tokens=int(outs[i]), fill_len=fill, arrival_step=arrival))
    return Workload(reqs, later.tokens(wl) if later is not None else {})


def check_given(given: dict[str, Any], wl: WorkloadConfig, pd_radix: bool | None, prefix_cache: str) -> None:
    """Options given (not defaulted) that the rest of the config silently overrode: min_len
    above input_len (the draw clamped it), the decode side's radix
    cache (pd_radix) where no PD request arrives, or beside no radix cache at all."""
    if "min_len" in given and wl.workload in ("uniform", "pd") and wl.min_len > wl.input_len:
        # (An output_len below it stays allowed: min_len = input_len with a shorter
        # output_len is how a config asks for prompts of one length and outputs of another.)
        raise UsageError(f"min_len must be at most input_len (got min_len {wl.min_len}, input_len {wl.input_len}): "
                         f"it is the lower bound of the uniform prompt lengths")
    if pd_radix:
        if wl.workload != "pd" and wl.prompts is None:
            raise UsageError(f"pd_radix (the decode side's radix cache) applies to PD arrivals only: workload pd "
                             f"or a prompts file (got workload {wl.workload})")
        if prefix_cache == "chunk":
            raise UsageError("pd_radix (the decode side's radix cache) contradicts prefix_cache chunk (no radix "
                             "cache); drop one")


def check_lengths(wl: WorkloadConfig, seed: int, max_context: int | None) -> None:
    """What make_workload refuses about its lengths, without drawing a token: a suite's
    configs are checked when it loads (a session longer than max_context failed only
    when its config ran, a failed row, where `kvbench run` refused it up front)."""
    import numpy as np  # numpy: here, not at the top: the CLI imports WORKLOADS to build its parser

    if wl.prompts is None:
        _lengths(wl, seed, np.random.default_rng([seed, 0x3017]), max_context)


def _lengths(wl: WorkloadConfig, seed: int, rng, max_context: int | None):
    """(prompt lengths, output lengths, later turns) drawn from ``rng``; a request or a
    session longer than max_context is bad input, found before any token is drawn."""
    import numpy as np  # numpy: here, not at the top: the CLI imports WORKLOADS to build its parser

    ins, outs = draw_lengths(wl, rng, wl.num_requests)
    too_long = np.flatnonzero(wl.shared_prefix + ins + outs > max_context) if max_context is not None else ()
    if len(too_long):
        i = int(too_long[0])
        check_context(i, wl.shared_prefix + int(ins[i]), int(outs[i]), max_context)
    return ins, outs, later_turns(wl, seed, ins, outs, max_context)  # whole sessions, before any token


# A prompts file of 10^6 lines ran on unbounded with nothing said (R11): a stated bound.
MAX_PROMPTS = 100_000


def load_prompts(path: str, *, default_output_len: int) -> list[Request]:
    """JSON lines: a list of token ids, or {"prompt": [...], "max_new_tokens": n, "fill_len": f}."""
    lines = read_document(path, "prompts file", UsageError).splitlines()
    if len(lines) > MAX_PROMPTS and sum(1 for line in lines if line.strip()) > MAX_PROMPTS:
        raise failure(UsageError, "prompts file", path, f"holds more than {MAX_PROMPTS:,} prompts, the most a run "
                      f"reads (each is parsed and checked, ~0.2 ms); split it")
    reqs: list[Request] = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"prompts file {path!r} line {lineno}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError as err:
            raise UsageError(f"{where}: not valid JSON ({err.msg})") from None
        out_len, fill = default_output_len, 0
        if isinstance(item, dict):
            unknown = set(item) - {"prompt", "max_new_tokens", "fill_len"}
            if unknown:
                raise UsageError(f"{where}: unknown key {sorted(unknown)[0]!r} (allowed: prompt, max_new_tokens, fill_len)")
            out_len = item.get("max_new_tokens", out_len)
            fill = item.get("fill_len", 0)
            item = item.get("prompt")
        if not isinstance(item, list) or not item or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in item):
            raise UsageError(f"{where}: a prompt must be a non-empty list of token ids >= 0")
        if isinstance(out_len, bool) or not isinstance(out_len, int) or out_len < 1:
            raise UsageError(f"{where}: max_new_tokens must be an integer >= 1 (got {out_len!r})")
        if isinstance(fill, bool) or fill not in (0, len(item)):
            raise UsageError(f"{where}: fill_len must be 0 or the prompt length {len(item)} (got {fill!r})")
        reqs.append(Request(rid=len(reqs), prompt=list(item), max_new_tokens=out_len, fill_len=fill))
    if not reqs:
        raise failure(UsageError, "prompts file", path, "holds no prompts")
    return reqs
