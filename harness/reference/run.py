"""One config on the reference engine: the mini engine's run for the output ids, then SGLang's loop.

``run_reference`` takes the options ``kvbench run`` takes and returns a result row of
the mini engine's format (harness/run/runner.py): the same metric names where SGLang's
components give the figure, the per-step series (sampler.py), ``engine`` and
``sglang_version``. What the reference does not drive is refused before any run, in
one line (UnsupportedByReference, exit 2).
"""

from __future__ import annotations

import time
import traceback
from typing import Any

from harness.core.errors import HarnessError
from harness.core.kv_units import derive
from harness.core.run_spec import RunSpec
from harness.core.workloads import make_workload
from harness.reference import loader, pd_decode
from harness.reference.driver import Driver
from harness.reference.scheduler import build
from harness.reference.spec import SUPPORTED as SPECS, spec_of
from harness.run.runner import as_spec, run_config
from mini_engine.config.pools import swa_pages
from mini_engine.spec.acceptance import Acceptance

ENGINE = "sglang"


class UnsupportedByReference(HarnessError):
    """A config the reference engine cannot run (one line, exit 2)."""


# Profile knobs that make a what-if of SGLang's accounting: the reference runs SGLang's own.
WHAT_IFS = ("policy", "align", "free_policy", "swa_eviction_interval", "row_headroom", "retraction", "admission",
            "pd_radix", "swa_ratio")


def check_supported(cfg, wl: dict, version: str) -> None:
    """UnsupportedByReference naming the first option the reference does not drive."""
    why = None
    # The decode radix cache is SGLang's own option on a decode node, not a what-if there.
    own = ("pd_radix",) if wl.get("workload") == "pd" else ()
    knob = next((k for k in WHAT_IFS if getattr(cfg, k) is not None and k not in own), None)
    profile = loader.PROFILE_OF[version]
    if cfg.profile != profile:
        why = f"--profile {cfg.profile} (the reference is SGLang {version}'s own loop: --profile {profile})"
    elif knob is not None:
        why = f"--{knob.replace('_', '-')} (a what-if of SGLang's rules; the reference runs SGLang's own)"
    elif cfg.spec not in SPECS:
        why = f"--spec {cfg.spec} (plain decoding, DFLASH and EAGLE only so far)"
    elif cfg.model != "none":
        why = f"--model {cfg.model} (the forward is a stand-in: model none)"
    elif wl.get("workload") == "pd":
        why = _pd_unsupported(cfg, wl, version)
    if why is not None:
        raise UnsupportedByReference(f"--engine {ENGINE} does not support {why}; run it on the mini engine")


def _pd_unsupported(cfg, wl: dict, version: str) -> str | None:
    """Why the decode side (pd_decode.py) cannot run this PD workload, or None."""
    if version != "0.5.23":
        return f"--workload pd on SGLang {version} (the decode side is driven on 0.5.23's queues only)"
    if wl.get("pd_fraction", 1.0) < 1.0:
        return ("--pd-fraction below 1 (a decode node prefills no prompt: SGLang's decode loop "
                "takes PD arrivals only)")
    return None


def run_reference(config: RunSpec | dict[str, Any]) -> dict[str, Any]:
    """The result row of ``config`` (a spec, or a dict parsed once here) on SGLang's own scheduler loop."""
    run = as_spec(config)
    cfg = run.engine
    check_supported(cfg, run.workload.to_dict(), loader.target())  # before the import: load() refuses others
    sg = loader.load()
    mini = run_config(run.on("mini"), outputs=True)  # the output ids the stand-in forward returns
    if mini["status"] == "failed":
        raise UnsupportedByReference(f"the mini engine's run of this config failed, so there are no output ids "
                                     f"to replay: {mini['error']}")
    if mini["violations"].get("K4"):
        # SGLang's reservation runs past the request's req_to_token row (issue 33579) and
        # writes into the next row's memory: on a CPU tensor its loop crashed the process.
        raise UnsupportedByReference(f"--engine {ENGINE} does not support a reservation past the request's row "
                                     f"(K4 in the mini engine's run, issue 33579: SGLang writes past the row); "
                                     f"run it on the mini engine")
    outputs = {o["rid"]: o["output"] for o in mini["outputs"]}
    work = make_workload(run.workload, cfg.seed, max_context=cfg.max_context)
    overlap, radix = cfg.rules.overlap, cfg.rules.prefix_cache == "radix"
    pd = run.workload.workload == "pd"  # every request a PD arrival (check_supported)
    # A decode node's tree: on only with its radix cache (handle_pd_disaggregation).
    radix = cfg.rules.pd_radix if pd else radix
    # engine=sglang in the key and the config: a reference row is never keyed, compared or
    # baselined as the mini engine's row of the same options.
    row: dict[str, Any] = {"key": run.on(ENGINE).key,
                           "config": {**mini["config"], "engine": ENGINE}, "engine": ENGINE,
                           "sglang_version": sg.version, "metrics": {}, "series": {}, "violations": {},
                           "violation_samples": [], "status": "failed", "error": None}
    spec = spec_of(cfg)
    driver = Driver(sg, work.requests, outputs, cfg.vocab_size, work.next_turns,
                    acceptance=Acceptance.from_config(cfg) if spec else None, spec=spec, topk=cfg.topk or 1)
    s = build(sg, driver, ps=cfg.page_size, num_pages=cfg.num_pages, max_running=cfg.max_running,
              max_context=cfg.max_context, chunk=cfg.chunked_prefill,
              radix=radix, overlap=overlap, vocab_size=cfg.vocab_size, spec=spec,
              swa=(swa_pages(cfg.num_pages, cfg.rules.swa_ratio), cfg.window) if cfg.has_swa else None,
              pd_reserved=cfg.reserved_decode_tokens if pd else None, pd_radix=pd and cfg.rules.pd_radix)
    if pd:
        driver.fake_host = pd_decode.fake_host()
    loop = (s.event_loop_overlap_disagg_decode if overlap else s.event_loop_normal_disagg_decode) if pd else (
        s.event_loop_overlap if overlap else s.event_loop_normal)
    t0 = time.perf_counter()
    try:
        loop()
    except Exception as err:  # SGLang's loop raising is a result, as a mini engine crash is
        row["error"] = f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=8)}"
        return row
    metrics = _metrics(s, driver, time.perf_counter() - t0)
    metrics.update(derive(mini["config"], metrics, driver.sampler.series))  # tokens and bytes beside the pages
    row.update(metrics=metrics, series=driver.sampler.series, status="ok")
    return row


def _metrics(s, driver: Driver, wall: float) -> dict[str, Any]:
    sm, series = driver.sampler, driver.sampler.series
    ps, tree = s.page_size, s.tree_cache
    reqs = driver.reqs
    lookup = sum(len(r.origin_input_ids) for r in reqs)
    hits = series["hits"][-1] if series["hits"] else 0
    alloc = s.token_to_kv_pool_allocator
    full = getattr(alloc, "full_attn_allocator", alloc)  # a hybrid SWA model's FULL pool
    tree_pages = 0 if tree.disable else (tree.evictable_size() + tree.protected_size()) // ps
    # A verify may run past max_new_tokens: SGLang keeps the ids, the request's output stops there.
    out = sum(min(len(r.output_ids), r.sampling_params.max_new_tokens) for r in reqs)
    steps = len(series["held"])
    return {
        "steps": steps, "prefill_steps": sm.prefill_steps, "decode_steps": sm.decode_steps,
        "requests": len(reqs), "finished_requests": sum(r.finished() for r in reqs), "aborted_requests": 0,
        "prefill_tokens": sm.prefill_tokens, "output_tokens": out, "wall_s": wall,
        "output_tokens_per_s": out / max(wall, 1e-9), "steps_per_s": steps / max(wall, 1e-9),
        "peak_pages_held": max(series["held"], default=0), "peak_pages_used": max(series["used"], default=0),
        "peak_reserved_slots": max(series["reserved"], default=0),
        "peak_stranded_slots": max(series["stranded"], default=0), "stranded_slots_sum": sum(series["stranded"]),
        "peak_swa_pages_held": max(series["swa_held"], default=0), "peak_running": max(series["running"], default=0),
        "retractions": sm.retractions, "tree_pages": tree_pages, "tree_evictable_pages": tree.evictable_size() // ps,
        "prefix_hit_tokens": hits, "prefix_hit_rate": hits / lookup if lookup else 0.0,
        "leaked_pages": (full.size - full.available_size()) // ps - tree_pages,
    }
