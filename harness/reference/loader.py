"""SGLang's scheduler module on a CPU, loaded once a process.

It is conform's serving-stack load (harness/conform/sglang_swa_radix.py: the same stand-ins,
the same cached import) plus what ``sglang.srt.managers.scheduler`` itself imports and
the reference loop never calls (SCHEDULER_STAND_INS). The server's configuration is
published the way SGLang's own CPU tests publish it (``ServerArgs`` for a dummy model,
``runtime_context.publish``), so the rules that read it (the schedule policy, the new
token ratio, the chunked prefill budget) read the run's values.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import os
import warnings
from types import SimpleNamespace

from harness.conform.swa_tree import sglang_swa
from harness.core.causes import one_line
from harness.core.errors import HarnessError
from harness.conform import sglang_swa_radix

# What the scheduler module imports beyond the tree's chain, never called here.
SCHEDULER_STAND_INS = (
    "setproctitle",  # names the scheduler process
    "einops",  # the linear-attention kernels' tensor reshapes
)
# The releases whose loop this reference drives (its stand-ins and the attributes
# scheduler.py sets), each beside the profile that follows it, the newest first.
PROFILE_OF = {"0.5.23": "sglang-0.5.23", "0.5.18": "sglang-pre-35265"}
SUPPORTED = tuple(PROFILE_OF)
# Set to 1, the reference drives whatever release is installed with the newest supported
# release's hooks, beside that release's profile: the nightly SGLang-regression job
# (ci/workflows/nightly-sglang.yml) runs the newest SGLang so, and a hook the release
# changed shows as a failed load or a failed config, a rule it changed as a difference.
UNTESTED_ENV = "KVBENCH_REFERENCE_UNTESTED"


class ReferenceUnavailable(HarnessError):
    """SGLang missing, unimportable or a release the reference cannot drive (one line, exit 2)."""


def target() -> str:
    """The release the reference runs as: the installed one where it drives it, else the
    newest it drives (load() then refuses the installed release, or under UNTESTED_ENV
    drives it so). Read from the metadata: no import."""
    try:
        version = installed_version()
    except Exception:  # not installed: load() says what to install
        return SUPPORTED[0]
    return version if version in PROFILE_OF else SUPPORTED[0]


def installed_version() -> str:
    """The installed SGLang's release, read from its metadata: importing ``sglang`` loads
    triton, which must first see conform's TRITON_INTERPRET (sglang_swa_radix.load)."""
    return importlib.metadata.version("sglang")


@functools.cache
def load() -> SimpleNamespace:
    """The installed SGLang's scheduler, batch, pool and tree modules by name."""
    try:
        version = installed_version()
    except Exception as err:  # not installed
        raise ReferenceUnavailable(f"--engine sglang needs SGLang {SUPPORTED[0]} installed "
                                   f"(pip install --no-deps sglang=={SUPPORTED[0]}; docs/conform.md): "
                                   f"{one_line(err)}") from None
    if version not in SUPPORTED and os.environ.get(UNTESTED_ENV) != "1":
        raise ReferenceUnavailable(f"--engine sglang drives SGLang {' and '.join(SUPPORTED)}'s loops; "
                                   f"SGLang {version} is installed ({UNTESTED_ENV}=1 drives it as "
                                   f"{SUPPORTED[0]}, beside profile sglang-{SUPPORTED[0]})")
    try:
        serving = sglang_swa()
        sglang_swa_radix.stand_in(SCHEDULER_STAND_INS)
        with warnings.catch_warnings():  # no Triton on a CPU: noise about kernels this loop never runs
            warnings.simplefilter("ignore", UserWarning)
            mods = _modules()
    except Exception as err:  # an ImportError, or a dependency failing at import time
        raise ReferenceUnavailable(f"SGLang {version}'s scheduler does not import here ({one_line(err)}); "
                                   f"docs/conform.md lists what to install") from None
    return SimpleNamespace(version=version, torch=serving.torch, serving=serving, **mods)


def _modules() -> dict:
    return {name: importlib.import_module(f"sglang.srt.{path}") for name, path in (
            ("scheduler", "managers.scheduler"), ("batch", "managers.schedule_batch"),
            ("policy", "managers.schedule_policy"), ("utils", "managers.utils"),
            ("processor", "managers.scheduler_components.batch_result_processor"),
            ("ratio", "managers.scheduler_components.new_token_ratio_tracker"),
            ("pool", "mem_cache.memory_pool"), ("paged", "mem_cache.allocator.paged"),
            ("token", "mem_cache.allocator.token"), ("context", "runtime_context"),
            ("server_args", "server_args"), ("sampling", "sampling.sampling_params"),
            ("spec", "speculative.spec_info"), ("dflash", "speculative.dflash_info_v2"),
            ("eagle", "speculative.eagle_info"), ("sizing", "mem_cache.allocation_sizing"))}
