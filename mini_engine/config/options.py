"""The engine's options, declared once: name, type, default, help, short id, bounds, group.

``EngineConfig``'s fields, the ``kvbench run`` flags, the TOML keys a config file
accepts, the short names of test ids and result keys, and the defaults the plots
assume are all read from here. An algorithm's own options (``block_size``,
``topk``, ...) are declared by its object in ``mini_engine.algos`` and join the
schema right after ``spec``; the harness adds the workload options
(``harness.core.options``).

Each option checks its own value (``Option.check`` in ``mini_engine.config.option``, the module
below the algorithms that declares what an option is); rules that tie options together
(an exclusive pair, a default that depends on another option) stay in ``EngineConfig``,
which runs both once, when a config is built.
"""

from __future__ import annotations

from mini_engine.algos import ALGORITHMS, ROW_HEADROOM_RULES, SPECS
from mini_engine.config.option import Option
from mini_engine.config.profiles import ADMISSIONS, OVERLAP, PROFILES, RETRACTIONS
from mini_engine.config.shapes import DEVICES, LAYER_PATTERNS
from mini_engine.errors import ConfigError
from mini_engine.memory.rules import AUDIT_MODES, FREE_RULES, POLICIES, PREFIX_CACHES


# The two registries are read when a value is checked: a plugin may register an
# algorithm (and with it a profile writer) after this module loaded.
def _specs() -> tuple[str, ...]:
    return tuple(SPECS)


def _profiles() -> tuple[str, ...]:
    return tuple(PROFILES)


_KNOB = "knob of the profile: "
# The engine's own options, in the order a config lists them (the algorithms'
# options are inserted after "spec"). Help strings are the CLI's.
CORE = (
    Option("page_size", int, 16, "slots per KV page", short="ps", minimum=1),
    Option("pool_tokens", int, None, "KV pool size in tokens (default 262144)", short="pool", minimum=1),
    Option("mem_fraction", float, None, "device memory share for weights + KV pools, in (0, 1]"),
    Option("max_running", int, 256, "most concurrent requests", minimum=1),
    Option("max_context", int, 4096, "longest prompt + output", minimum=1),
    Option("chunked_prefill", int, 8192, "prefill tokens per step", minimum=1),
    Option("reserved_decode_tokens", int, 512, "PD decode side: tokens each active request keeps for its decoding "
           "when a transfer is preallocated (SGLang's --num-reserved-decode-tokens; admission sglang)",
           short="rdt", minimum=0),
    Option("spec", str, "none", "speculative algorithm", choices=_specs),
    Option("window", int, None, "SWA window in positions (default: no SWA)", minimum=1, group="swa"),
    Option("layer_pattern", str, None, "local:global layer pattern (default all-global, 1:1 with a window)",
           short="layers", choices=tuple(LAYER_PATTERNS), group="swa"),
    Option("profile", str, "sglang-0.5.23",  # profiles.DEFAULT_PROFILE (a test keeps them equal)
           "accounting profile (floor-free is a what-if, no shipped version)", choices=_profiles, group="profile"),
    Option("policy", str, None, _KNOB + "shorthand: aligned = --align all, unaligned = --align none",
           choices=POLICIES, group="profile"),
    Option("align", str, None, _KNOB + "writers that page-ceil their extent: all, none or a comma list of "
           "extend,decode,pd,eagle,dflash or a plugin algorithm's writer (ngram plans as eagle)", group="profile"),
    Option("free_policy", str, None, _KNOB + "how release frees pages (segment = SGLang 0.5.23's, "
           "unique-row = 0.5.18's)", short="free",
           choices=FREE_RULES, group="profile", flag="--free"),
    Option("swa_eviction_interval", int, None, _KNOB + "SGLANG_SWA_EVICTION_INTERVAL, positions past the window "
           "before a decode step evicts (128)", minimum=1, group="profile"),
    Option("prefix_cache", str, None, _KNOB + "radix: SGLang's radix prefix tree (full attention: match at "
           "admission, pages kept in the tree after finish, evicted when an allocation is short) and its SWA "
           "eviction threshold; chunk: --disable-radix-cache (no tree, free at release; chunked prefill evicts "
           "SWA too). SWA models run the SWA-aware tree under radix", choices=PREFIX_CACHES, group="profile"),
    Option("swa_ratio", float, None, _KNOB + "SWA pool size as a share of the full pool (0.8)", minimum=0.0,
           group="profile"),
    Option("pd_radix", bool, None, _KNOB + "the decode side's radix cache "
           "(--disaggregation-decode-enable-radix-cache): without it a PD decode side runs no prefix tree; "
           "it sets the PD SWA tail", group="profile"),
    Option("row_headroom", str, None, _KNOB + "req_to_token row headroom, SGLang's (DFLASH at ps 1 can "
           "overflow: K4) or generous", choices=ROW_HEADROOM_RULES,
           group="profile"),
    Option("retraction", str, None, _KNOB + "who is retracted on a short pool: SGLang's fewest-outputs-first "
           "(its ratio constants) or the newest", choices=RETRACTIONS,
           group="profile"),
    Option("admission", str, None, _KNOB + "the memory side of prefill admission: sglang = SGLang 0.5.23's "
           "PrefillAdder (tokens, ignore_eos ratio 1.0, outputs capped at 4096, max_prefill_tokens); estimate = "
           "kvbench's page estimate with the decaying new-token ratio",
           choices=ADMISSIONS, group="profile"),
    Option("overlap", str, None, _KNOB + "SGLang's overlap scheduler (on in 0.5.23 for EAGLE and DFLASH; off = "
           "--disable-overlap-schedule; plain decode's reservation is not stale, but its frees land one plan late and its SWA eviction reads the lagging length, one step later; with --prefix-cache chunk it also moves "
           "chunked-prefill eviction); a TOML bool is read as on/off", choices=OVERLAP,
           group="profile"),
    Option("audit", str, "record", "invariant checks after each step",
           choices=AUDIT_MODES),
    Option("seed", int, 0, "seed of the workload and the simulated tokens", minimum=0),
    Option("model", str, "none", "'none' (accounting only), a built-in model, or a checkpoint dir", group="model"),
    Option("device", str, "cpu", "where device tensors live", choices=DEVICES),
    Option("accept_len", int, None, "simulated accepted length, fixed (bonus included)", short="acc", minimum=1,
           group="acceptance"),
    Option("accept_mean", float, None, "simulated accepted length, mean of a seeded law", short="acc_mean",
           minimum=1.0, group="acceptance"),
    Option("temperature", float, 0.0, "sampling temperature of a real model", minimum=0.0, group="model"),
    Option("vocab_size", int, 32000, "vocabulary of the simulated tokens", minimum=2),
    Option("draft_layers", int, None, "real model: target layers the drafter shares", minimum=0, group="model"),
    Option("draft_noise", float, None, "real model: noise on the drafter's weights", minimum=0.0, group="model"),
)


def engine_options() -> tuple[Option, ...]:
    """Every engine option: the core ones with the registered algorithms' after ``spec``."""

    algo: dict[str, Option] = {}
    for a in ALGORITHMS.values():
        for o in a.options:
            known = algo.setdefault(o.name, o)
            if (known.type, known.default) != (o.type, o.default):
                raise ConfigError(f"option {o.name!r} is declared twice with different types or defaults "
                                  f"(algorithm {a.name!r})")
    out: list[Option] = []
    for o in CORE:
        out.append(o)
        if o.name == "spec":
            out.extend(algo.values())
    return tuple(out)


def by_name() -> dict[str, Option]:
    return {o.name: o for o in engine_options()}
