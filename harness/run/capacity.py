"""How many requests fit on a GPU, answered without one.

For a model shape, a GPU's memory and ``mem_fraction``, the engine's own sizing
formulas (mini_engine/config/pools.py) give the KV pool and what
one request needs at its peak, so the capacity is plain arithmetic:

    pool_tokens   = (floor(gpu_bytes * mem_fraction) - weight_bytes)
                    // (kv_bytes_per_token + draft_kv_bytes_per_token)
    pages         = pool_tokens // page_size
    admission     = pages, or min(pages, SWA pages) with sliding layers (SGLang's min)
    request_pages = ceil((context + decode reserve) / page_size), + 1 page when a writer
                    of the profile is unaligned (its extent may strand a page's tail)
    requests      = admission // request_pages

Weights and KV are counted in the shape's serving dtype (bf16 for the named GPU
shapes), as on a GPU. The GPU profiles are the marketed sizes taken as GiB (what
CUDA reports is within a few percent); ``--gpu-mem`` gives any other size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.core.errors import UsageError
from harness.core.run_spec import RunSpec
from harness.core.turns import nominal_length
from mini_engine.config.engine_config import EngineConfig
from mini_engine.config.option import Option
from mini_engine.config.pools import footprint, pool_tokens
from mini_engine.config.pools import request_pages, swa_pages

GiB = 1 << 30
GPUS = {"rtx5090": ("RTX 5090", 32 * GiB), "h100": ("H100", 80 * GiB), "h200": ("H200", 141 * GiB)}
PAGE_SIZES = (1, 16, 64)
# One more GPU's memory, in GiB: from 10 MiB to 16 TiB (a hundred times today's largest;
# inf, 1e308 overflowed to a traceback and 1e30 printed a table of 10^30-scale counts).
GPU_MEM = Option("--gpu-mem (GiB)", float, minimum=0.01, maximum=16384.0, flag="--gpu-mem",
                 help="with --capacity: one more GPU of this many GiB")
DEFAULT_FRACTION = 0.9


@dataclass(frozen=True)
class Capacity:
    gpu: str
    gpu_bytes: int
    page_size: int
    weight_bytes: int
    kv_bytes_per_token: int  # target and drafter KV of one token slot
    pool_tokens: int
    pages: int
    admission_pages: int
    request_pages: int

    @property
    def requests(self) -> int:
        return self.admission_pages // self.request_pages


def engine_config(options: dict[str, Any]):
    """The run's options as an EngineConfig on a GPU (bf16, sized by mem_fraction)."""

    opts = {k: v for k, v in options.items() if k in EngineConfig.option_names()}
    opts.update(device="cuda", pool_tokens=None, mem_fraction=opts.get("mem_fraction") or DEFAULT_FRACTION)
    if opts.get("model", "none") == "none":
        raise UsageError("capacity needs a model shape: --model qwen3-0.6b, llama-3.1-8b, tiny or a checkpoint "
                         "directory (the accounting-only backend loads none)")
    return EngineConfig.from_dict(opts)


def capacity(options: dict[str, Any], context: int, gpu: str, gpu_bytes: int | None = None) -> Capacity:
    """Requests of ``context`` tokens (prompt + output) that fit on ``gpu`` under ``options``."""

    if gpu_bytes is None:
        if gpu not in GPUS:
            raise UsageError(f"gpu must be one of {', '.join(GPUS)} (got {gpu!r}); --gpu-mem GIB for another")
        gpu_bytes = GPUS[gpu][1]
    if context < 1:
        raise UsageError(f"context must be an integer >= 1 (got {context})")
    cfg = engine_config(options)
    fp = footprint(cfg)
    tokens = pool_tokens(gpu_bytes, cfg.mem_fraction, fp)
    pages = tokens // cfg.page_size
    # pools.admission_pages for this GPU's pages (it reads the machine we run on)
    admit = min(pages, swa_pages(pages, cfg.rules.swa_ratio)) if cfg.has_swa else pages
    return Capacity(gpu, gpu_bytes, cfg.page_size, fp.weight_bytes, fp.kv_bytes_per_token + fp.draft_kv_bytes_per_token,
                    tokens, pages, admit, request_pages(cfg, context, 0))


def grid(options: dict[str, Any], context: int, gpus: dict[str, int], page_sizes=PAGE_SIZES) -> list[Capacity]:
    """One Capacity per (page size, GPU): the table kvbench run --capacity prints."""
    return [capacity({**options, "page_size": ps}, context, name, size) for ps in page_sizes
            for name, size in gpus.items()]


def gpus_of(custom_gib: float | None) -> dict[str, int]:
    """The three profiles, and ``--gpu-mem`` as a fourth column."""
    out = {name: size for name, (_, size) in GPUS.items()}
    if custom_gib is not None:
        custom_gib = GPU_MEM.check(custom_gib)
        out[f"{custom_gib:g} GiB"] = int(custom_gib * GiB)
    return out


def table_rows(caps: list[Capacity]) -> tuple[list[str], list[list[str]]]:
    """(heads, rows): one column per GPU; the KV pool in tokens, then one row per page
    size, each cell the requests that fit."""
    gpus = list(dict.fromkeys(c.gpu for c in caps))
    by = {}
    for i, c in enumerate(caps):
        by[(i // len(gpus), c.gpu)] = c
    rows = [["KV pool, tokens"] + [f"{by[(0, g)].pool_tokens:,}" for g in gpus]]
    for r in range(len(caps) // len(gpus)):
        first = by[(r, gpus[0])]
        rows.append([f"ps {first.page_size}: {first.request_pages} pages/req"] + [f"{by[(r, g)].requests:,}" for g in gpus])
    return ["requests that fit", *gpus], rows


def for_run(spec: RunSpec, shape: str, gpu_mem: float | None) -> tuple[str, list[str], list[list[str]]]:
    """``kvbench run --capacity [SHAPE]``: the run's options (its model, or SHAPE) across
    the GPU profiles and page sizes, for its longest request. (title, heads, rows)."""

    full = spec.resolved()  # the workload's lengths with their defaults
    model = shape or full.get("model") or "none"
    context = nominal_length(full)  # input + output, after any shared prefix and earlier turns
    caps = grid({**full, "model": model}, context, gpus_of(gpu_mem))
    c = caps[0]
    frac = full.get("mem_fraction") or DEFAULT_FRACTION
    title = (f"capacity: requests of {context} tokens that fit, {model} ({c.kv_bytes_per_token:,} KV bytes a token, "
             f"{c.weight_bytes / GiB:.2f} GiB of weights), mem_fraction {frac:g}, spec {full.get('spec')}, "
             f"accounting profile {full.get('profile')}" + (f", window {full['window']}" if full.get("window") else ""))
    heads, rows = table_rows(caps)
    return title, heads, rows
