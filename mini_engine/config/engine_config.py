"""EngineConfig: every knob of one engine run, validated up front.

Its fields are the option schema (mini_engine/config/options.py, with the registered
algorithms' own options), declared there once with type, default and bounds.
Validation happens once, in ``__post_init__``, so the step loop can trust every
field. Options that only make sense for one algorithm (``block_size`` for DFLASH,
``topk`` for EAGLE, ...) default to ``None`` and are filled in for that algorithm;
passing one for another algorithm is a contradiction, not something to ignore
silently, because a sweep that sets it believes it is measuring something.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import field
from pathlib import Path
from typing import Any

from mini_engine import algos
from mini_engine.config.option import Option, check_float as _check_float, dataclass_from
from mini_engine.config.options import by_name, engine_options
from mini_engine.config.pools import footprint, pool_tokens
from mini_engine.config.profiles import Profile, resolve
from mini_engine.config.shapes import LAYER_PATTERNS, SHAPES
from mini_engine.errors import ConfigError, check_choice, check_positive
from mini_engine.files import read_document

# KV shape used to turn mem_fraction into pool tokens when no real model is loaded:
# Qwen3-0.6B's (28 layers, 8 KV heads of dim 128, bf16), a common small target.
NOMINAL_LAYERS = 28
NOMINAL_KV_HEADS = 8
NOMINAL_HEAD_DIM = 128
NOMINAL_DTYPE_BYTES = 2

DEFAULT_POOL_TOKENS = 1 << 18
# Options checked on their own before any rule that ties options together reads them.
_CHECKED_FIRST = ("page_size", "max_running", "max_context", "chunked_prefill", "vocab_size", "spec")


@dataclass_from(engine_options)
class EngineConfig:
    """Every option of mini_engine.config.options.engine_options() is a field (page_size, spec, ...)."""

    # Pages of the pool, computed on first use: sizing by mem_fraction reads the
    # device, which a config validated on another machine may not have.
    _num_pages: int | None = field(init=False, default=None, repr=False, compare=False)
    _profile: Profile | None = field(init=False, default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        schema = by_name()
        for name in _CHECKED_FIRST:  # the single-option checks of the schema, in this order
            setattr(self, name, schema[name].check(getattr(self, name)))
        self._resolve_profile()
        for name in ("audit", "device", "seed"):
            setattr(self, name, schema[name].check(getattr(self, name)))
        if not isinstance(self.model, str) or not self.model:
            raise ConfigError(f"model must be 'none', a built-in model name or a checkpoint directory (got {self.model!r})")
        self.temperature = schema["temperature"].check(self.temperature)
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
        schema = by_name()
        for name in ("profile", "policy", "free_policy", "prefix_cache", "swa_ratio"):
            setattr(self, name, schema[name].check(getattr(self, name)))
        self._profile = resolve(
            self.profile, policy=self.policy, align=self.align, free=self.free_policy,
            swa_eviction_interval=self.swa_eviction_interval, prefix_cache=self.prefix_cache,
            swa_ratio=self.swa_ratio, pd_radix=self.pd_radix, row_headroom=self.row_headroom,
            retraction=self.retraction, admission=self.admission, overlap=self.overlap)

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
        w, ps = self.window, self.page_size
        if w is not None and w > ps and w % ps and self._profile.swa_keep_unrounded:
            # 0.5.18's radix tree keeps max(window, ps) unrounded below a moved window and
            # repoints a checkpoint through a window-gated match; kvbench has 0.5.23's rules,
            # which agree with it only where the window is whole pages (or one page at most).
            raise ConfigError(f"window={w} with page_size={ps} under profile {self.profile!r} (SGLang 0.5.18) is not "
                              f"modelled: allowed a window that is a multiple of page_size or at most page_size")

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
        if self.model in SHAPES:
            return SHAPES[self.model].kv_bytes_per_token("all")
        return NOMINAL_LAYERS * 2 * NOMINAL_KV_HEADS * NOMINAL_HEAD_DIM * NOMINAL_DTYPE_BYTES

    # -- (de)serialisation -------------------------------------------------

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls) if f.init)

    @classmethod
    def options(cls) -> tuple[Option, ...]:
        """The schema of every field (mini_engine/config/options.py and the algorithms' options)."""
        return engine_options()

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


def read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The parsed TOML file, or a one-line ConfigError naming it (mini_engine/files.py)."""
    return read_document(Path(path), "config file", ConfigError, fmt="toml")


def load_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Engine options from a TOML file: top-level keys, and an [engine] table merged in."""
    return read_tables(path, ("engine",))


def read_tables(path: str | os.PathLike[str], tables: tuple[str, ...],
                error: type[Exception] = ConfigError) -> dict[str, Any]:
    """A TOML file's options, flat: its top-level keys with the named tables merged in.
    Any other table, or a table nested in one of them, is `error` in one line. The
    caller names the tables it owns (the engine [engine]; a harness run [workload] too)."""
    allowed = "allowed: " + ", ".join(f"[{t}]" for t in tables)
    flat: dict[str, Any] = {}
    origin: dict[str, str] = {}  # where each option was set: one given twice took one value silently
    where = str(Path(path))

    def put(name: str, value: Any, place: str) -> None:
        if name in origin:
            raise error(f"config file {where!r}: option {name!r} is set both {origin[name]} and {place}; set it once")
        origin[name] = place
        flat[name] = value

    for key, value in read_toml(path).items():
        if key in tables and isinstance(value, dict):
            for sub, v in value.items():
                if isinstance(v, dict):
                    raise error(f"config file {where!r}: unknown table [{key}.{sub}] ({allowed})")
                put(sub, v, f"in [{key}]")
        elif isinstance(value, dict):
            raise error(f"config file {where!r}: unknown table [{key}] ({allowed})")
        else:
            put(key, value, "at the top level")
    return flat


def require_cuda() -> None:
    """device='cuda' on a machine without one is bad input, not a torch traceback."""
    import torch  # torch: optional, loaded only on this path

    if not torch.cuda.is_available():
        raise ConfigError("device='cuda' but no CUDA device is visible; use device=cpu")


def _device_memory_bytes(device: str) -> int:
    if device == "cuda":
        import torch  # torch: optional, loaded only on this path

        require_cuda()
        return int(torch.cuda.mem_get_info()[1])
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
