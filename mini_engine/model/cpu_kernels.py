"""The compiled CPU kernels (csrc/): paged decode attention, a whole decode layer, and the
few-queries attention of speculative verify and the drafters.

torch.utils.cpp_extension compiles the C++ sources with the host's g++ and ninja into
its cache (TORCH_EXTENSIONS_DIR, by default ~/.cache/torch_extensions) the first time
a CPU decode step asks for them, about a minute; later processes load the cached
library in milliseconds, and concurrent processes (pytest-xdist workers) wait for the
live builder instead of compiling twice, saying so, for a bounded time (build_lock.py:
a lock left by a killed builder is known as such and removed at once). Without a compiler or ninja, or with
KVBENCH_CPU_KERNELS=0, one line is logged and the decode step keeps the pure-torch
path: same results (up to float rounding in attention), slower.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import shutil
from pathlib import Path

import torch

from mini_engine.model.build_lock import BuildBusy, building

log = logging.getLogger(__name__)

CSRC = Path(__file__).with_name("csrc")
# Four translation units, compiled in parallel, the longest first (ninja starts them in
# this order, three at a time on two cores): the kernels include only the ATen headers
# they use and register.cpp alone the dispatcher's (csrc/ops.h says why).
SOURCES = [CSRC / name for name in ("decode_layer.cpp", "register.cpp", "extend_attention.cpp", "decode_attention.cpp")]
NAME = "kvbench_cpu_kernels"  # + the host's CPU features (see _build_name)
# -march=native: the loops vectorise to the host's widest registers (a fifth faster than
# the x86-64 baseline with AVX-512). -fno-trapping-math lets the exp loop vectorise (no
# code here reads floating-point exception flags). -fopenmp: at::parallel_for is a header
# template over `#pragma omp parallel`, so without it every split in csrc/ runs on one
# thread; linked with it, the library needs libgomp.so.1, the runtime torch already loaded
# (torch.set_num_threads sets its thread count).
FLAGS = ["-O3", "-march=native", "-fno-trapping-math", "-fopenmp"]
LDFLAGS = ["-fopenmp"]
_state: dict = {}


def ops():
    """torch.ops.kvbench_cpu (decode_attention, extend_attention, decode_layers,
    greedy_head, rms_norm, silu_mul), or None where the kernels cannot be built."""
    if "ops" not in _state:
        _state["ops"] = torch.ops.kvbench_cpu if _load() else None
    return _state["ops"]


def decode_attention():
    """The paged decode attention kernel, or None."""
    k = ops()
    return None if k is None else k.decode_attention.default


def extend_attention():
    """The few-queries paged attention kernel (verify, drafters), or None."""
    k = ops()
    return None if k is None else k.extend_attention.default


def _build_name(flags_used: list[str]) -> str:
    flags = platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            flags += next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        pass
    # The sources' and headers' text names the build too: torch rebuilds a cached build in
    # place when a source changes (and never for a header), so two checkouts with different
    # kernels sharing one cache directory would rebuild over each other (or load the other's).
    # So does where the sources are: torch's build file names them by path, and two checkouts
    # of the same kernels took turns rebuilding one cached build (minutes each, inside a
    # config that had been built for before the grid started).
    flags += " ".join(flags_used) + str(CSRC.resolve())
    flags += "".join(f.read_text() for f in sorted(CSRC.glob("*.h")) + SOURCES)
    return f"{NAME}_{hashlib.sha1(flags.encode()).hexdigest()[:10]}"


def _load():
    if os.environ.get("KVBENCH_CPU_KERNELS", "1") == "0":
        log.info("CPU decode kernels off (KVBENCH_CPU_KERNELS=0): the model runs its pure-torch path")
        return False
    missing = [tool for tool in ("ninja", os.environ.get("CXX", "c++")) if shutil.which(tool) is None]
    if missing:
        log.warning("CPU decode kernels not built (%s not found): the model runs its pure-torch path",
                    " and ".join(missing))
        return False
    try:
        if _build(FLAGS, LDFLAGS):
            return True
        # A compiler without OpenMP (Apple's clang, say): the same kernels, each on one thread.
        serial = [f for f in FLAGS if f != "-fopenmp"]
        if _build(serial, [], quiet=False):
            log.warning("CPU decode kernels built without OpenMP: their loops run on one thread")
            return True
    except BuildBusy as err:  # a live builder past the bound: this run goes on without the kernels
        log.warning("CPU decode kernels not loaded (%s): the model runs its pure-torch path", err)
    return False


def _build(cflags: list[str], ldflags: list[str], quiet: bool = True) -> bool:
    try:
        from torch.utils import cpp_extension  # cpp_extension: loads setuptools, only when the kernels build

        # The build is named after the CPU's features (FLAGS has -march=native) and its flags,
        # so a cache directory shared by different hosts never loads a foreign build.
        name = _build_name(cflags + ldflags)
        with building(Path(cpp_extension._get_build_directory(name, verbose=False))):
            cpp_extension.load(name, [str(s) for s in SOURCES], extra_cflags=cflags, extra_ldflags=ldflags,
                               is_python_module=False, verbose=False)
        return True
    except BuildBusy:
        raise  # no second build beside a live one (_load)
    except Exception as err:  # a failed build must never stop a run: the torch path is always there
        if quiet:
            return False
        # The builder's message carries the whole compiler command: its first words suffice.
        first = (str(err).strip().splitlines() or [type(err).__name__])[0].split(": [")[0]
        log.warning("CPU decode kernels not built (%s): the model runs its pure-torch path", first[:160])
        return False

