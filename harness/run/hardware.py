"""Which machine a run is on, and how much memory a run used.

The profile names the baseline a run is compared with: ``cpu`` wherever NVML is
absent (no driver, no GPU) or no GPU is visible, else the model of the first GPU
that ``CUDA_VISIBLE_DEVICES`` leaves visible (rtx5090, h100, h200). Memory is
what the device says: torch's peak allocation and NVML's used bytes on a GPU,
the process RSS on a CPU.
"""

from __future__ import annotations

import os
import platform
import resource
import sys
from dataclasses import asdict, dataclass, field
from importlib.metadata import version
from typing import Any

from harness.run import devices

PROFILES = ("cpu", "rtx5090", "h100", "h200")
# Substrings of NVML's device name, checked in order.
_NAME_TO_PROFILE = (("5090", "rtx5090"), ("H100", "h100"), ("H200", "h200"))


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's model name: every CPU machine shares the ``cpu`` profile and baseline, so
    meta.json at least says which one ran. platform.processor() is empty on Linux; the
    kernel's cpuinfo names it ("model name", or "Hardware"/"Processor" on Arm)."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                name, _, value = line.partition(":")
                if name.strip() in ("model name", "Hardware", "Processor", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@dataclass
class Hardware:
    profile: str
    gpu_name: str | None = None
    gpu_count: int = 0  # visible GPUs (CUDA_VISIBLE_DEVICES applied), not the machine's
    gpu_ids: list[str] = field(default_factory=list)  # their UUIDs (GPU-... or MIG-...)
    driver: str | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    cpu: str = field(default_factory=lambda: cpu_model())
    cpu_count: int = field(default_factory=lambda: os.cpu_count() or 1)
    torch_version: str | None = None
    triton_version: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def profile_for(gpu_name: str | None) -> str:
    if not gpu_name:
        return "cpu"
    for needle, profile in _NAME_TO_PROFILE:
        if needle.lower() in gpu_name.lower():
            return profile
    # An unknown GPU gets its own profile name, so it never borrows another's baseline.
    return "gpu-" + "".join(c if c.isalnum() else "-" for c in gpu_name.lower()).strip("-")


def detect() -> Hardware:
    """The machine as this process sees it: the GPUs CUDA_VISIBLE_DEVICES leaves visible,
    the profile of the first of them (a worker pinned to one GPU reads its own)."""
    hw = Hardware(profile="cpu", torch_version=_version("torch"), triton_version=_version("triton"))
    with devices.nvml() as nv:
        if nv is None:
            return hw
        gpus = devices.visible(nv)
        if not gpus:  # CUDA_VISIBLE_DEVICES="" (or naming nothing): a CPU run on a GPU machine
            return hw
        first = gpus[0]
        hw.gpu_count, hw.gpu_ids = len(gpus), [g.uuid for g in gpus]
        hw.gpu_name = first.name
        hw.driver = devices._text(nv.nvmlSystemGetDriverVersion())
        mem = nv.nvmlDeviceGetMemoryInfo(first.handle)
        hw.memory_total_bytes, hw.memory_used_bytes = int(mem.total), int(mem.used)
        hw.profile = profile_for(hw.gpu_name)
    return hw


def _version(module: str) -> str | None:
    try:
        return version(module)
    except Exception:
        return None


def rss_bytes() -> int:
    """Current resident set size of this process."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # no /proc (macOS): the peak is the closest figure there is
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak if sys.platform == "darwin" else peak * 1024)


def reset_rss_peak() -> None:
    """Start a new RSS peak, so a run in a long process (a sweep) reports its own peak."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # Linux: reset the process's RSS high-water mark to the current RSS
    except OSError:
        pass  # elsewhere the peak stays the process's peak


def rss_peak_bytes() -> int:
    """RSS high-water mark since the last reset_rss_peak (Linux), else of the process."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # Linux reports KiB


class RssPeak:
    """The process RSS high-water mark over a block (``bytes``, read on exit).

    run_config wraps the engine's construction and run in it, so ``rss_peak_bytes``
    counts that run's pools and rows and not what an earlier config in the same
    process (a sweep worker) touched."""

    bytes: int = 0

    def __enter__(self) -> RssPeak:
        reset_rss_peak()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bytes = rss_peak_bytes()


class MemoryProbe:
    """Memory of one run: reset the device peak before, read it after.

    A run's RSS peak is run_config's own figure (``rss_peak_bytes``, see RssPeak);
    the process's lifetime peak is left out: in a sweep it is whatever the biggest
    config before this one took, so it would tie a config's figure to test order."""

    def __enter__(self) -> MemoryProbe:
        try:
            import torch  # torch: optional, loaded only on this path

            if torch.cuda.is_available():
                torch.cuda.reset_peak_memory_stats()
        except ImportError:
            pass
        self.rss_before = rss_bytes()
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def figures(self) -> dict[str, int]:
        now = rss_bytes()
        out = {"mem_rss_bytes": now, "mem_rss_growth_bytes": max(0, now - self.rss_before)}
        try:
            import torch  # torch: optional, loaded only on this path

            if torch.cuda.is_available() and torch.cuda.is_initialized():
                out["mem_torch_peak_bytes"] = int(torch.cuda.max_memory_allocated())
        except ImportError:
            pass
        used = nvml_used_bytes()
        if used is not None:
            out["mem_nvml_used_bytes"] = used
        return out


def nvml_used_bytes() -> int | None:
    """NVML's used bytes of the first visible GPU (this worker's own when pinned)."""
    try:
        with devices.nvml() as nv:
            if nv is None:
                return None
            gpus = devices.visible(nv)
            return int(nv.nvmlDeviceGetMemoryInfo(gpus[0].handle).used) if gpus else None
    except Exception:  # a driver that fails mid-query: no figure rather than no run
        return None
