"""EngineConfig: every knob of one engine run, validated up front.

Validation happens once, in ``__post_init__``, so the step loop can trust every
field. Options that only make sense for one algorithm (``block_size`` for DFLASH,
``topk`` for EAGLE, ...) default to ``None`` and are filled in for that algorithm;
passing one for another algorithm is a contradiction, not something to ignore
silently, because a sweep that sets it believes it is measuring something.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from mini_engine import algos
from mini_engine.algos import SPECS
from mini_engine.errors import ConfigError, check_choice, check_positive
from mini_engine.pool_budget import footprint, pool_tokens
from mini_engine.profiles import DEFAULT_PROFILE, FREE_RULES, POLICIES, PREFIX_CACHES, PROFILES, Profile, resolve
PROFILE_NAMES = tuple(PROFILES)
FREE_POLICIES = FREE_RULES
__all__ = ["POLICIES", "PREFIX_CACHES", "PROFILE_NAMES", "FREE_POLICIES", "SPECS", "EngineConfig", "load_toml"]
AUDIT_MODES = ("record", "raise", "off")
DEVICES = ("cpu", "cuda")
# local:global layer ratios; "all-global" means no SWA layer at all.
LAYER_PATTERNS = {
    "all-local": (1, 0),
    "1:1": (1, 1),
    "3:1": (3, 1),
    "5:1": (5, 1),
    "all-global": (0, 1),
}

# KV shape used to turn mem_fraction into pool tokens when no real model is loaded:
# Qwen3-0.6B's (28 layers, 8 KV heads of dim 128, bf16), a common small target.
NOMINAL_LAYERS = 28
NOMINAL_KV_HEADS = 8
NOMINAL_HEAD_DIM = 128
NOMINAL_DTYPE_BYTES = 2

DEFAULT_POOL_TOKENS = 1 << 18


@dataclass
class EngineConfig:
    page_size: int = 16
    pool_tokens: int | None = None
    mem_fraction: float | None = None
    max_running: int = 256
    max_context: int = 4096
    chunked_prefill: int = 8192
    spec: str = "none"
    block_size: int | None = None
    draft_window: int | None = None
    topk: int | None = None
    steps: int | None = None
    num_draft_tokens: int | None = None
    window: int | None = None
    layer_pattern: str | None = None
    # The accounting profile and its knobs (mini_engine.profiles); None: the profile's value.
    profile: str = DEFAULT_PROFILE
    policy: str | None = None
    align: str | None = None
    free_policy: str | None = None
    swa_eviction_interval: int | None = None
    prefix_cache: str | None = None
    swa_ratio: float | None = None
    pd_radix: bool | None = None
    row_headroom: str | None = None
    retraction: str | None = None
    overlap: str | bool | None = None  # "on" / "off" (a TOML bool too)
    audit: str = "record"
    seed: int = 0
    model: str = "none"
    device: str = "cpu"
    accept_len: int | None = None
    accept_mean: float | None = None
    temperature: float = 0.0
    vocab_size: int = 32000
    # Real-model drafters only: target layers the drafter shares and the noise on
    # its weights, the knobs that set how often the draft agrees with the target.
    draft_layers: int | None = None
    draft_noise: float | None = None
    # Pages of the pool, computed on first use: sizing by mem_fraction reads the
    # device, which a config validated on another machine may not have.
    _num_pages: int | None = field(init=False, default=None, repr=False, compare=False)
    _profile: Profile | None = field(init=False, default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_positive("page_size", self.page_size)
        check_positive("max_running", self.max_running)
        check_positive("max_context", self.max_context)
        check_positive("chunked_prefill", self.chunked_prefill)
        check_positive("vocab_size", self.vocab_size, minimum=2)
        check_choice("spec", self.spec, SPECS)
        self._resolve_profile()
        check_choice("audit", self.audit, AUDIT_MODES)
        check_choice("device", self.device, DEVICES)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"seed must be an integer >= 0 (got {self.seed!r})")
        if not isinstance(self.model, str) or not self.model:
            raise ConfigError(f"model must be 'none', a built-in model name or a checkpoint directory (got {self.model!r})")
        self.temperature = _check_float("temperature", self.temperature, low=0.0)
        self._resolve_spec()
        self._resolve_swa()
        self._resolve_acceptance()
        self._resolve_drafter()
        self._resolve_pool()

    # -- validation pieces -------------------------------------------------

    def _resolve_spec(self) -> None:
        algo = self.algo
        algo.check_foreign(self, [a for a in algos.ALGORITHMS.values() if a is not algo])
        algo.resolve(self)

    def _resolve_profile(self) -> None:
        check_choice("profile", self.profile, PROFILE_NAMES)
        if self.policy is not None:
            check_choice("policy", self.policy, POLICIES)
        if self.free_policy is not None:
            check_choice("free_policy", self.free_policy, FREE_RULES)
        if self.prefix_cache is not None:
            check_choice("prefix_cache", self.prefix_cache, PREFIX_CACHES)
        if self.swa_ratio is not None:
            self.swa_ratio = _check_float("swa_ratio", self.swa_ratio, low=0.0)
        self._profile = resolve(
            self.profile, policy=self.policy, align=self.align, free=self.free_policy,
            swa_eviction_interval=self.swa_eviction_interval, prefix_cache=self.prefix_cache,
            swa_ratio=self.swa_ratio, pd_radix=self.pd_radix, row_headroom=self.row_headroom,
            retraction=self.retraction, overlap=self.overlap)

    def _resolve_swa(self) -> None:
        if self.window is not None:
            check_positive("window", self.window)
        if self.layer_pattern is None:
            self.layer_pattern = "all-global" if self.window is None else "1:1"
        check_choice("layer_pattern", self.layer_pattern, tuple(LAYER_PATTERNS))
        local, _ = LAYER_PATTERNS[self.layer_pattern]
        if self.window is not None and local == 0:
            raise ConfigError(
                f"window={self.window} needs SWA layers but layer_pattern is 'all-global'; "
                "use all-local, 1:1, 3:1 or 5:1, or drop window"
            )
        if self.window is None and local > 0:
            raise ConfigError(f"layer_pattern={self.layer_pattern!r} has SWA layers and needs a window (window >= 1)")

    def _resolve_acceptance(self) -> None:
        if self.accept_len is not None and self.accept_mean is not None:
            raise ConfigError("accept_len and accept_mean are exclusive: give a fixed length or a mean, not both")
        if not self.speculative:
            for name in ("accept_len", "accept_mean"):
                if getattr(self, name) is not None:
                    raise ConfigError(f"{name} applies to speculative decoding only (spec is 'none')")
            return
        most = self.max_accept
        if self.accept_len is not None:
            check_positive("accept_len", self.accept_len)
            if self.accept_len > most:
                raise ConfigError(f"accept_len must be in 1..{most} for this draft (bonus token included) (got {self.accept_len})")
        if self.accept_mean is not None:
            self.accept_mean = _check_float("accept_mean", self.accept_mean, low=1.0)
            if self.accept_mean > most:
                raise ConfigError(f"accept_mean must be in [1, {most}] for this draft (bonus token included) (got {self.accept_mean})")

    def _resolve_drafter(self) -> None:
        for name in ("draft_layers", "draft_noise"):
            if getattr(self, name) is None:
                continue
            if self.model == "none" or not self.speculative:
                raise ConfigError(f"{name} applies to a real model's drafter only (model={self.model!r}, spec={self.spec!r})")
        if self.draft_layers is not None:
            check_positive("draft_layers", self.draft_layers, minimum=0)
        if self.draft_noise is not None:
            self.draft_noise = _check_float("draft_noise", self.draft_noise, low=0.0)

    def _resolve_pool(self) -> None:
        if self.pool_tokens is not None and self.mem_fraction is not None:
            raise ConfigError("pool_tokens and mem_fraction are exclusive: size the pool one way")
        if self.mem_fraction is not None:
            frac = _check_float("mem_fraction", self.mem_fraction, low=0.0)
            if not 0.0 < frac <= 1.0:
                raise ConfigError(f"mem_fraction must be in (0, 1] (got {self.mem_fraction})")
            self.mem_fraction = frac
            return
        if self.pool_tokens is None:
            self.pool_tokens = DEFAULT_POOL_TOKENS
        self._pages_from(check_positive("pool_tokens", self.pool_tokens))

    def _pages_from(self, tokens: int) -> int:
        if tokens < self.page_size:
            raise ConfigError(
                f"pool_tokens must hold at least one page of page_size={self.page_size} (got {tokens} tokens)"
            )
        self._num_pages = tokens // self.page_size
        return self._num_pages

    @property
    def num_pages(self) -> int:
        if self._num_pages is None:
            self._pages_from(pool_tokens(_device_memory_bytes(self.device), self.mem_fraction, footprint(self)))
        return self._num_pages

    # -- derived quantities ------------------------------------------------

    @property
    def algo(self) -> algos.Algorithm:
        return algos.get(self.spec)

    @property
    def rules(self) -> Profile:
        """The resolved accounting profile (the named one with its overridden knobs)."""
        return self._profile

    @property
    def speculative(self) -> bool:
        return self.algo.speculative

    @property
    def max_accept(self) -> int:
        """Most tokens one verify can accept, the bonus token included."""
        return self.algo.max_accept(self)

    @property
    def step_reserve(self) -> int:
        """Slots one decode step reserves ahead of committed (plain decode: 1)."""
        return self.algo.step_reserve(self)

    @property
    def has_swa(self) -> bool:
        return LAYER_PATTERNS[self.layer_pattern][0] > 0

    @property
    def kv_bytes_per_token(self) -> int:
        # Both pools are sized in tokens alike, so every layer costs one token's KV.
        if self.model != "none":
            from mini_engine.model.config import SHAPES  # a named shape knows its own KV size

            if self.model in SHAPES:
                return SHAPES[self.model].kv_bytes_per_token("all")
        return NOMINAL_LAYERS * 2 * NOMINAL_KV_HEADS * NOMINAL_HEAD_DIM * NOMINAL_DTYPE_BYTES

    # -- (de)serialisation -------------------------------------------------

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls) if f.init)

    @classmethod
    def from_dict(cls, options: dict[str, Any]) -> EngineConfig:
        names = cls.option_names()
        clean: dict[str, Any] = {}
        for key, value in options.items():
            name = str(key).replace("-", "_")
            if name not in names:
                raise ConfigError(f"unknown engine option {key!r} (allowed: {', '.join(names)})")
            clean[name] = value
        return cls(**clean)

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.option_names()}

    @classmethod
    def from_toml(cls, path: str | os.PathLike[str]) -> EngineConfig:
        return cls.from_dict(load_toml(path))


def load_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A flat dict of options from a TOML file; [engine] and [workload] tables are merged in."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {str(p)!r} not found") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {str(p)!r} is a directory") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {str(p)!r} is not valid TOML: not UTF-8 text") from None
    except ValueError as err:  # TOMLDecodeError, or an integer of more digits than Python converts
        raise ConfigError(f"config file {str(p)!r} is not valid TOML: {err}") from None
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if key in ("engine", "workload") and isinstance(value, dict):
            for sub, v in value.items():
                if isinstance(v, dict):
                    raise ConfigError(f"config file {str(p)!r}: unknown table [{key}.{sub}] (allowed: [engine], [workload])")
            flat.update(value)
        elif isinstance(value, dict):
            raise ConfigError(f"config file {str(p)!r}: unknown table [{key}] (allowed: [engine], [workload])")
        else:
            flat[key] = value
    return flat


def _check_float(name: str, value: object, *, low: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{name} must be a number >= {low} (got {value!r})")
    if value < low:
        raise ConfigError(f"{name} must be a number >= {low} (got {value})")
    return float(value)


def require_cuda() -> None:
    """device='cuda' on a machine without one is bad input, not a torch traceback."""
    import torch

    if not torch.cuda.is_available():
        raise ConfigError("device='cuda' but no CUDA device is visible; use device=cpu")


def _device_memory_bytes(device: str) -> int:
    if device == "cuda":
        import torch

        require_cuda()
        return int(torch.cuda.mem_get_info()[1])
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
