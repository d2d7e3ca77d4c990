"""Every figure a result row carries, declared once.

A row's ``metrics`` come from the engine (mini_engine/stats.py), the memory probe
of the harness (harness/run/hardware.py) and the auditor (``violations.K<n>``, one
count per invariant id); its ``series`` are per-step lists. Each is declared here
with what kind of figure it is (which decides how compare gates it), its unit,
its group (the `/` section MLflow shows it under), which way is better (lower, higher, none), and a
line of help. Row keys and baselines keep the plain names; MLflow sees
``group/name``, and the headline figures (HEADLINE) ``at a glance/name``.

kinds:
  counter  deterministic (pages, slots, leaks, violations, syncs, steps, tokens):
           any change is a regression.
  timing   a noisy time or rate: a regression only when >= 10% worse and a
           Mann-Whitney U over repeated samples says the shift is real.
  memory   bytes of one run (torch's peak, reset per run): gated like a timing.
  info     reported, never gated: acceptance figures, and process- or device-wide
           bytes (RSS, NVML used), which hold what earlier configs in the same
           worker left, so they follow test order rather than the config.

A name that is not declared is an error (UnknownMetric): a figure nobody declared
would otherwise be gated by a guess.

The kind decides the gate (GATES): compare and the baseline read ``Metric.gate``,
never a name. ``column`` places a figure in the table a sweep prints (its head is
``head`` and the unit, one word a line), and ``rollup`` says how a large sweep's
table folds it over the configs of one algorithm and policy (max or sum).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.core.errors import HarnessError, UsageError
from mini_engine.memory.rules import WRITER_KINDS  # who sets a request's extent (stranded slots per writer)


KINDS = ("counter", "timing", "memory", "info")
# How compare judges each kind: "exact" (any change is a regression), "noise" (>= 10%
# worse and a Mann-Whitney U says the shift is real), "none" (shown, never gated).
GATES = {"counter": "exact", "timing": "noise", "memory": "noise", "info": "none"}
ROLLUPS = ("max", "sum")
# Which way a figure is better (compare says improved or regressed); "none" where a change
# only says the work differs (the workload's own counts, the formula's prediction).
BETTER = ("lower", "higher", "none")
# How a derived figure converts its source (harness/core/kv_units.py):
#   page_size  pages -> token slots (x page_size)
#   kv_full    full-pool token slots -> bytes (x the model's KV bytes per token of its full layers)
#   kv_swa     SWA-pool token slots -> bytes (x the KV bytes per token of its sliding layers)
#   kv_all     slots reserved in every pool -> bytes (x the KV bytes per token of every layer)
#   kv_pools   the per-step held series of both pools -> the peak of their bytes together
SCALES = ("page_size", "kv_full", "kv_swa", "kv_all", "kv_pools")
GROUPS = ("memory", "swa", "invariants", "engine", "spec", "throughput", "timing", "process", "device")
INVARIANTS = tuple(f"K{i}" for i in range(1, 15))  # DESIGN.md section 2
STATUSES = ("ok", "violated", "pool_exhausted", "failed")  # a row's status: the engine's verdict, or failed
# The figures a report trends by default: memory in token slots, comparable across page
# sizes (harness/core/kv_units.py); pages by --metric NAME.
TREND_METRICS = ("peak_tokens_held", "peak_stranded_slots", "peak_reserved_slots", "leaked_tokens",
                 "output_tokens_per_s")
# What the accounting-only backend's rates measure: the host bookkeeping, not a model.
BOOKKEEPING = "bookkeeping speed (model none: no forward pass, accounting only)"
# MLflow 3.17 draws a run's charts in sections named by what precedes a metric name's last
# '/', ordered by that name, so a config run opened on engine/ counters of zeros. The
# headline figures are named under a section that sorts before every group (in code-unit
# and in locale order, MLflow uses both), so a run opens on them; in this order they are
# logged first, and MLflow's compare-runs view starts on the first metric a run logged.
HEADLINE_SECTION = "at a glance"
HEADLINE = ("peak_tokens_held", "peak_stranded_slots", "leaked_tokens")
# Beside them, a config's verdict as a figure (MLflow charts numbers): 1 when it ran as the
# suite expects (verdict ok or as_expected), 0 when not. MLflow's alone: a row keeps its verdict word.
HEADLINE_VERDICT = "verdict_pass"
# A sweep's parent run opens on a headline of its own, the night's figures a reader wants
# first, folded over its configs: ``at a glance/<name>`` (name, unit, what it is). They
# duplicate the parent's aggregates and verdict counts (memory/<name>.<fold>/all, sweep/...),
# which keep their names so their trend lines reach earlier nights; harness/view/mlflow_layout.py
# folds them (a ``<metric>.<max|sum>`` is that aggregate over every measured config).
SWEEP_HEADLINE = (
    ("configs_unexpected", "configs", "configs that did not run as the suite expects (verdict unexpected or failed)"),
    ("violations_unexpected", "violations", "invariant violations in configs the suite does not expect to violate"),
    ("leaked_tokens.sum", "tokens", "full-pool token slots not back after drain, summed over the configs"),
    ("peak_tokens_held.max", "tokens", "most full-pool token slots a config held at once, the max over the configs"),
    ("peak_stranded_slots.max", "slots", "most slots a config stranded at once, the max over the configs"),
)


class UnknownMetric(HarnessError):
    """A metric name that harness/core/metrics.py does not declare."""


@dataclass(frozen=True)
class Metric:
    name: str
    kind: str
    unit: str
    group: str
    better: str  # which way is better: "lower", "higher" or "none" (a change is news, not good or bad)
    help: str
    series: bool = False  # a per-step list in row["series"], not a scalar in row["metrics"]
    column: int = 0  # its place in the sweep's summary table, 0 for none
    head: str = ""  # the words of its column head before the unit ("peak stranded" + "slots")
    rollup: str = ""  # how the grouped table folds it over configs: "max", "sum", "" for not shown
    # A figure the harness derives from another (harness/core/kv_units.py): ``of`` names the source,
    # ``scale`` how it converts (SCALES). Pages are not comparable across page sizes; tokens and
    # bytes are, so the dashboards show these and keep the pages beside them.
    of: str = ""
    scale: str = ""

    @property
    def higher_is_better(self) -> bool:
        return self.better == "higher"

    @property
    def gate(self) -> str:
        """exact, noise or none: how compare judges a change (GATES)."""
        return GATES[self.kind]

    @property
    def column_head(self) -> str:
        """Head and unit stacked a word a line, so the table fits a terminal."""
        return "\n".join(f"{self.head} {self.unit}".split())

    @property
    def mlflow_name(self) -> str:
        """Its name in MLflow: a headline figure under HEADLINE_SECTION, the rest under its group."""
        return f"{HEADLINE_SECTION}/{self.name}" if self.name in HEADLINE and not self.series else self.group_name

    @property
    def group_name(self) -> str:
        """``group/name``: the stem of the parent's aggregates (``memory/peak_tokens_held.max/all``)."""
        if self.series:
            return f"{self.group}/series/{self.name}"
        if self.name.startswith("violations."):
            return f"{self.group}/{self.name.split('.', 1)[1]}"
        return f"{self.group}/{self.name}"

    @property
    def is_rate(self) -> bool:
        """A throughput: with ``model none`` it is the bookkeeping's speed."""
        return self.group == "throughput"


def _m(name: str, kind: str, unit: str, group: str, help: str, *, hib: bool = False, better: str = "",
       series: bool = False, column: int = 0, head: str = "", rollup: str = "", of: str = "", scale: str = "") -> Metric:
    assert kind in KINDS and group in GROUPS and rollup in ("", *ROLLUPS), (name, kind, group, rollup)
    assert not rollup or column, (name, "a rolled-up figure is a column of the table too")
    assert bool(of) == bool(scale) and scale in ("", *SCALES), (name, of, scale)
    better = better or ("higher" if hib else "lower")
    assert better in BETTER, (name, better)
    return Metric(name, kind, unit, group, better, help, series, column, head, rollup, of, scale)


_DECLARED = [
    # engine work (mini_engine/stats.py)
    _m("steps", "counter", "steps", "engine", "engine steps, prefill and decode", column=1, better="none"),
    _m("prefill_steps", "counter", "steps", "engine", "steps that ran a prefill chunk", better="none"),
    _m("decode_steps", "counter", "steps", "engine", "decode steps (plain or speculative)", better="none"),
    _m("requests", "counter", "requests", "engine", "requests submitted", better="none"),
    _m("finished_requests", "counter", "requests", "engine", "requests that finished", hib=True),
    _m("prefill_tokens", "counter", "tokens", "engine", "prompt tokens prefilled", better="none"),
    _m("output_tokens", "counter", "tokens", "engine", "tokens generated, bonus tokens included", better="none"),
    _m("peak_running", "counter", "requests", "engine", "most requests running at once", better="none"),
    _m("retractions", "counter", "requests", "engine", "requests retracted to free pages"),
    _m("releases", "counter", "requests", "engine", "requests released (finished or retracted)", better="none"),
    _m("pd_arrivals", "counter", "requests", "engine", "requests that arrived by PD transfer (an aborted one never transfers)",
       better="none"),
    _m("aborted_requests", "counter", "requests", "engine",
       "PD arrivals SGLang 0.5.23 aborts at prealloc: the SWA tail's reclaim fell short"),
    _m("clipped_requests", "counter", "requests", "engine",
       "requests whose output SGLang clips at arrival to what an empty pool holds", better="none"),
    _m("clipped_output_tokens", "counter", "tokens", "engine", "output tokens those clips cut", better="none"),
    _m("syncs", "counter", "syncs", "engine", "device reads by the scheduler (0 is the goal of host planning)",
       column=7),
    _m("syncs_per_step", "counter", "syncs/step", "engine", "device syncs per engine step"),
    _m("release_syncs", "counter", "syncs", "engine", "device syncs of the unique frees as SGLang pays them: "
       "one per free group holding one (0.5.18's release of the committed row; with SWA also "
       "its SWA allocator's page unique and mask, at release and window eviction)"),
    # speculative decoding
    _m("tau", "info", "tokens/verify", "spec", "mean accepted length per verify, bonus token included", hib=True),
    _m("acceptance_rate", "info", "ratio", "spec", "accepted drafts over drafted tokens", hib=True),
    _m("peak_compact_draft_len", "counter", "tokens", "spec", "longest compact DFLASH draft context (K9's bound)",
       better="none"),
    # time and rates
    _m("wall_s", "timing", "s", "timing", "wall time of the engine run"),
    _m("plan_us_per_decode_step", "timing", "us", "timing",
       "host planning time per decode step (retract, evict, reserve and allocate, the batch arrays)"),
    _m("result_us_per_decode_step", "timing", "us", "timing",
       "host time per decode step processing its result (commits, output tokens, finishes)"),
    _m("output_tokens_per_s", "timing", "tokens/s", "throughput", "output tokens per second of wall time", hib=True,
       column=2, head="out"),
    _m("steps_per_s", "timing", "steps/s", "throughput", "engine steps per second", hib=True),
    _m("requests_per_s", "timing", "requests/s", "throughput", "finished requests per second", hib=True),
    # paged KV memory
    _m("peak_pages_held", "counter", "pages", "memory",
       "most full-pool pages running requests held at once (their own and the locked prefix-tree pages under them)"),
    _m("peak_reserved_slots", "counter", "slots", "memory",
       "most reserved-but-unwritten slots (the cost of reserving ahead)", column=4, head="peak reserved"),
    _m("peak_stranded_slots", "counter", "slots", "memory", "most slots stranded past unaligned extents at once",
       column=3, head="peak stranded", rollup="max"),
    _m("stranded_slots_sum", "counter", "slot-steps", "memory", "stranded slots summed over steps"),
    _m("leaked_pages", "counter", "pages", "memory", "full-pool pages not back on the free list after drain",
       column=5, head="leaked", rollup="sum"),
    _m("predicted_leaked_pages", "counter", "pages", "memory",
       "the DESIGN.md formula's leaked pages (one per unaligned host free)", column=6, head="predicted leaked",
       rollup="sum", better="none"),
    # sliding-window attention
    _m("leaked_swa_pages", "counter", "pages", "swa", "SWA-pool pages not back on the free list after drain"),
    _m("predicted_leaked_swa_pages", "counter", "pages", "swa", "the formula's leaked SWA pages", better="none"),
    # invariants (the per-id counts are declared below)
    _m("violations", "counter", "violations", "invariants", "invariant violations of every id"),
    # process and device memory (harness/run/hardware.py MemoryProbe, the engine's RSS peak)
    _m("rss_peak_bytes", "info", "bytes", "process", "process RSS high-water mark during the run"),
    _m("mem_rss_bytes", "info", "bytes", "process", "process RSS after the run"),
    _m("mem_rss_growth_bytes", "info", "bytes", "process", "process RSS growth over the run"),
    _m("mem_torch_peak_bytes", "memory", "bytes", "device", "torch's peak CUDA allocation during the run"),
    _m("mem_nvml_used_bytes", "info", "bytes", "device", "NVML's used bytes of the GPU (device-wide) after the run"),
    # the accounting profiles' figures (issue 9): SWA pages, writer kinds, row overflows
    _m("peak_swa_pages_held", "counter", "pages", "swa", "most SWA-pool pages held by requests at once"),
    _m("swa_retractions", "counter", "requests", "swa", "retractions forced by the SWA pool"),
    _m("row_overflow_slots", "counter", "slots", "memory",
       "distinct positions past the req_to_token row that reservations reached (K4), each once"),
    _m("row_overwritten_slots", "counter", "slots", "memory",
       "positions of another req_to_token row written by a reservation past its own row (issue 33579)"),
    *(_m(f"peak_stranded_slots_{w}", "counter", "slots", "memory", f"most slots stranded by {w} writes at once")
      for w in WRITER_KINDS),
    # overlap scheduling (mini_engine/scheduler/overlap.py): the decode reservation against the true committed lengths
    _m("peak_reserved_ahead_slots", "counter", "slots", "memory",
       "most slots a decode batch held reserved past its true committed lengths (in-flight results counted)"),
    _m("reserved_ahead_slots_sum", "counter", "slot-steps", "memory", "slots reserved ahead, summed over decode steps"),
    _m("overlap_extra_reservations", "counter", "reservations", "memory",
       "overlap: reservations given to requests the in-flight result finishes"),
    _m("overlap_extra_slots", "counter", "slots", "memory",
       "overlap: slots those extra reservations allocated (freed when the result lands)"),
    # the radix prefix cache (mini_engine/memory/tree/prefix.py); 0 where no tree runs (chunk cache, SWA, PD decode)
    _m("peak_pages_used", "counter", "pages", "memory",
       "most full-pool pages off the free list at once: held by requests or by the prefix tree"),
    _m("peak_tree_pages", "counter", "pages", "memory", "most full-pool pages held by the prefix tree at once",
       better="none"),
    _m("tree_pages", "counter", "pages", "memory", "pages the prefix tree holds after the drain", better="none"),
    _m("tree_evictable_pages", "counter", "pages", "memory",
       "pages of the prefix tree no request locks after the drain (reclaimable, not free)", better="none"),
    _m("tree_evicted_pages", "counter", "pages", "memory", "pages the prefix tree evicted to make room",
       better="none"),
    _m("prefix_hit_tokens", "counter", "tokens", "memory",
       "prompt tokens matched in the prefix tree at each request's first admission (SGLang's cached_tokens)",
       hib=True),
    _m("prefix_hit_rate", "info", "ratio", "memory", "prefix hit tokens over the tokens first admissions looked up",
       hib=True),
    _m("readmit_hit_tokens", "counter", "tokens", "memory",
       "tokens matched in the prefix tree when a retracted request was admitted again (not in prefix_hit_tokens)",
       better="none"),
    # the memory figures in token slots and KV bytes (harness/core/kv_units.py); bytes only where the
    # model's shape is known (a named shape or a checkpoint's config.json), target KV only
    _m("peak_tokens_held", "counter", "tokens", "memory", "most full-pool token slots held at once (pages x page_size)",
       of="peak_pages_held", scale="page_size"),
    _m("peak_tokens_used", "counter", "tokens", "memory",
       "most full-pool token slots off the free list at once, the prefix tree's included (pages x page_size)",
       of="peak_pages_used", scale="page_size"),
    *(_m(name.replace("pages", "tokens"), "counter", "tokens", "memory", f"{about} (pages x page_size)", of=name,
         scale="page_size", better="none")
      for name, about in (("peak_tree_pages", "most full-pool token slots in the prefix tree at once"),
                          ("tree_pages", "token slots the prefix tree holds after the drain"),
                          ("tree_evictable_pages", "token slots of the prefix tree no request locks after the drain"),
                          ("tree_evicted_pages", "token slots the prefix tree evicted to make room"))),
    _m("peak_swa_tokens_held", "counter", "tokens", "swa", "most SWA-pool token slots held at once",
       of="peak_swa_pages_held", scale="page_size"),
    _m("leaked_tokens", "counter", "tokens", "memory", "full-pool token slots not back after drain",
       of="leaked_pages", scale="page_size"),
    _m("predicted_leaked_tokens", "counter", "tokens", "memory", "the formula's leaked token slots",
       of="predicted_leaked_pages", scale="page_size", better="none"),
    _m("leaked_swa_tokens", "counter", "tokens", "swa", "SWA-pool token slots not back after drain",
       of="leaked_swa_pages", scale="page_size"),
    _m("predicted_leaked_swa_tokens", "counter", "tokens", "swa", "the formula's leaked SWA token slots",
       of="predicted_leaked_swa_pages", scale="page_size", better="none"),
    _m("peak_kv_bytes_held", "counter", "bytes", "memory",
       "most KV bytes held at once, both pools (layers x KV heads x head dim x dtype x 2 per slot)",
       of="held", scale="kv_pools"),
    _m("leaked_kv_bytes", "counter", "bytes", "memory", "KV bytes of the full-pool slots not back after drain",
       of="leaked_tokens", scale="kv_full"),
    _m("leaked_swa_kv_bytes", "counter", "bytes", "swa", "KV bytes of the SWA-pool slots not back after drain",
       of="leaked_swa_tokens", scale="kv_swa"),
    _m("peak_reserved_kv_bytes", "counter", "bytes", "memory", "KV bytes of the peak reserved-but-unwritten slots",
       of="peak_reserved_slots", scale="kv_all"),
    _m("peak_stranded_kv_bytes", "counter", "bytes", "memory", "KV bytes of the peak stranded slots",
       of="peak_stranded_slots", scale="kv_all"),
    # retired: no longer emitted, still in recorded nights and baselines that compare and triage read
    _m("mem_peak_rss_bytes", "info", "bytes", "process", "retired: the process's lifetime RSS peak (test order, not the config)"),
    _m("k9_checks", "counter", "checks", "invariants", "retired: K9 bound checks made by the engine loop",
       better="none"),
    # per-step series (row["series"])
    _m("stranded", "counter", "slots", "memory", "stranded slots after each step", series=True),
    _m("reserved", "counter", "slots", "memory", "reserved-but-unwritten slots after each step", series=True),
    _m("held", "counter", "pages", "memory", "full-pool pages held after each step", series=True),
    _m("swa_held", "counter", "pages", "swa", "SWA-pool pages held after each step", series=True),
    *(_m(f"violations.{k}", "counter", "violations", "invariants", f"violations of {k} (DESIGN.md section 2)")
      for k in INVARIANTS),
]

METRICS: dict[str, Metric] = {m.name: m for m in _DECLARED if not m.series}
SERIES: dict[str, Metric] = {m.name: m for m in _DECLARED if m.series}
assert len(METRICS) + len(SERIES) == len(_DECLARED), "a metric is declared twice"
# The sweep's summary table, in column order.
COLUMNS: tuple[Metric, ...] = tuple(sorted((m for m in METRICS.values() if m.column), key=lambda m: m.column))
assert len({m.column for m in COLUMNS}) == len(COLUMNS), "two metrics share a summary column"
# The figures the harness derives, in declaration order (a source is declared before what derives from it).
DERIVED: tuple[Metric, ...] = tuple(m for m in METRICS.values() if m.of)
assert all(m.of in METRICS or m.of in SERIES for m in DERIVED), "a derived figure names an undeclared source"
assert set(HEADLINE) <= set(METRICS), "a headline figure is not declared"
assert {n.split(".")[0] for n, _, _ in SWEEP_HEADLINE if "." in n} <= set(METRICS), \
    "a sweep headline folds an undeclared figure"


def lookup(name: str) -> Metric:
    """The declared scalar metric (``violations.K3`` included)."""
    try:
        return METRICS[name]
    except KeyError:
        raise UnknownMetric(f"metric {name!r} is not declared in harness/core/metrics.py") from None


def series(name: str) -> Metric:
    try:
        return SERIES[name]
    except KeyError:
        raise UnknownMetric(f"series {name!r} is not declared in harness/core/metrics.py") from None


def row_metrics(row: dict) -> dict[str, float]:
    """A row's numeric scalars by their plain names: its metrics and its per-id violation counts."""
    named = [*(row.get("metrics") or {}).items(),
             *((f"violations.{vid}", n) for vid, n in (row.get("violations") or {}).items())]
    return {name: float(v) for name, v in named if isinstance(v, (int, float)) and not isinstance(v, bool)}


def undeclared(row: dict) -> list[str]:
    """Names a row carries that the schema does not declare (the schema test's check)."""
    names = [n for n in row_metrics(row) if n not in METRICS]
    names += [f"series.{s}" for s in (row.get("series") or {}) if s not in SERIES]
    return sorted(names)


def bookkeeping_only(config: dict) -> bool:
    """True when a config's rates time the accounting alone (the ``none`` model backend)."""
    return (config or {}).get("model", "none") == "none"


def check_metric_option(names: list[str] | None, option: str, extra: tuple[str, ...] = ()) -> None:
    """A metric a user names for a chart or a table (--metric, --heatmap) must be one a
    row can carry: a typo drew an empty chart and said nothing."""
    for name in names or []:
        if name not in METRICS and name not in extra and not name.startswith("mem_"):
            raise UsageError(f"{option} must name a declared metric (e.g. {', '.join(sorted(METRICS)[:4])}, ...; "
                              f"the full list: harness/core/metrics.py) (got {name!r})")
