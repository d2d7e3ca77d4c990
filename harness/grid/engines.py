"""A sweep on another engine: ``kvbench sweep SUITE --engine sglang`` sets every config's
``engine``, and the configs the reference cannot run are left out with their reasons.

Left out, not refused: a nightly suite mixes the release's own profile with what-if
profiles and real models, and the reference runs the release's own loop only; refusing
the whole sweep would leave a nightly nothing to run. The reasons are printed in one line
before any config runs (how many configs, for which reason), as ``kvbench conform
--engine --suite`` counts them.
"""

from __future__ import annotations

import collections
import dataclasses

from harness.core.engine_option import engine_of
from harness.grid.suites import Suite


def with_engine(suite: Suite, engine: str | None) -> Suite:
    """The suite with every config on ``engine`` (None: each config's own)."""
    if engine is None:
        return suite
    engine_of({"engine": engine})  # one line naming the choices
    return dataclasses.replace(suite, configs=[c.on(engine) for c in suite.configs])


def unsupported(suite: Suite) -> dict[str, str]:
    """config id -> why the reference cannot run it, for each config on engine sglang it cannot run."""
    out: dict[str, str] = {}
    configs = [c for c in suite.configs if engine_of(c.config) == "sglang"]
    if not configs:
        return out
    # Only a sweep on engine sglang loads these (no SGLang import: the loader names its release).
    from harness.reference import loader  # numpy, through the reference package
    from harness.reference.run import UnsupportedByReference, check_supported  # numpy

    for c in configs:
        try:
            check_supported(c.spec.engine, c.spec.workload.to_dict(), loader.target())
        except UnsupportedByReference as err:
            out[c.id] = str(err)
    return out


def skipped_line(reasons: dict[str, str], total: int) -> str:
    """One line: how many configs are left out, by reason."""
    counts = collections.Counter(_reason(r) for r in reasons.values())
    by = "; ".join(f"{n} for {why}" for why, n in counts.most_common())
    return f"engine sglang: {len(reasons)} of {total} configs not run, the reference does not support them: {by}"


def _reason(message: str) -> str:
    # "--engine sglang does not support --profile X (...); run it on the mini engine" -> "--profile X (...)"
    head = message.split(" does not support ", 1)[-1]
    return head.rsplit("; run it on the mini engine", 1)[0]
