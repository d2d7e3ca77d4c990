"""Which GPUs this process may use, and how a sweep's workers share them.

NVML sees every GPU of the machine; CUDA sees only what ``CUDA_VISIBLE_DEVICES``
names. A shared runner given GPUs ``4,5,6,7`` must count four GPUs, profile GPU 4
and pin its workers to 4-7, so every GPU question goes through ``visible()``,
which reads the variable as CUDA does:

* unset: every GPU NVML lists, in NVML's (PCI bus) order;
* empty (or a list that names nothing): no GPU, the run is a CPU run;
* a comma list of indices, ``GPU-<uuid>`` (a unique prefix is enough, as for
  CUDA) or MIG instances (``MIG-<uuid>``, or the older ``MIG-GPU-<uuid>/<gi>/<ci>``).
  The list ends at the first entry that names no device (or one already named),
  as CUDA's does. Indices are NVML's, which are CUDA's when
  ``CUDA_DEVICE_ORDER=PCI_BUS_ID``; on a machine of one GPU model the orders agree.
  CUDA's own default is FASTEST_FIRST, so the workers a sweep starts get
  ``PCI_BUS_ID`` (``pci_bus_order``), and a user who set another order on a machine
  whose GPUs differ is told, in one line, that kvbench reads indices in bus order.

A worker is pinned by the UUID of its device (``GPU-...`` or ``MIG-...``): the
one identifier that means the same device whatever the enumeration order, and
one the outer restriction already allows, so pins compose with it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from harness.core.errors import HarnessError


ENV = "CUDA_VISIBLE_DEVICES"
ORDER = "CUDA_DEVICE_ORDER"
PCI_BUS_ID = "PCI_BUS_ID"


class DeviceError(HarnessError):
    """More workers than GPUs, or a device request the machine cannot meet."""


@dataclass(frozen=True)
class Device:
    index: int  # NVML index of the physical GPU (of the parent GPU for a MIG instance)
    uuid: str  # GPU-... or MIG-...: what a worker's CUDA_VISIBLE_DEVICES is set to
    name: str
    memory_total: int
    mig: bool = False
    handle: Any = field(default=None, repr=False, compare=False)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@contextmanager
def nvml() -> Iterator[Any]:
    """pynvml, initialised; None where there is no driver (a CPU machine)."""
    try:
        import pynvml  # nvml: optional, loaded only on this path
    except ImportError:
        yield None
        return
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError: no driver, no GPU, a container without the library
        yield None
        return
    try:
        yield pynvml
    finally:
        pynvml.nvmlShutdown()


def _gpu(nv, i: int) -> Device:
    h = nv.nvmlDeviceGetHandleByIndex(i)
    return Device(i, _text(nv.nvmlDeviceGetUUID(h)), _text(nv.nvmlDeviceGetName(h)),
                  int(nv.nvmlDeviceGetMemoryInfo(h).total), handle=h)


def _migs(nv, gpu: Device) -> list[tuple[Device, int, int]]:
    """The MIG instances of a GPU in MIG mode, with their (GPU instance, compute instance) ids."""
    try:
        if nv.nvmlDeviceGetMigMode(gpu.handle)[0] != nv.NVML_DEVICE_MIG_ENABLE:
            return []
        slots = int(nv.nvmlDeviceGetMaxMigDeviceCount(gpu.handle))
    except nv.NVMLError:  # not MIG-capable
        return []
    out = []
    for k in range(slots):
        try:
            h = nv.nvmlDeviceGetMigDeviceHandleByIndex(gpu.handle, k)
        except nv.NVMLError:  # an empty slot
            continue
        dev = Device(gpu.index, _text(nv.nvmlDeviceGetUUID(h)), _text(nv.nvmlDeviceGetName(h)),
                     int(nv.nvmlDeviceGetMemoryInfo(h).total), mig=True, handle=h)
        out.append((dev, int(nv.nvmlDeviceGetGpuInstanceId(h)), int(nv.nvmlDeviceGetComputeInstanceId(h))))
    return out


def _match(token: str, gpus: list[Device], nv) -> Device | None:
    if token.isdigit():
        i = int(token)
        return gpus[i] if i < len(gpus) else None
    if token.startswith("GPU-"):
        hits = [g for g in gpus if g.uuid.startswith(token)]
        return hits[0] if len(hits) == 1 else None  # CUDA takes a unique prefix only
    if token.startswith("MIG-GPU-"):  # MIG-GPU-<uuid>/<gi>/<ci>, before driver R470
        parts = token[len("MIG-"):].split("/")
        if len(parts) != 3 or not (parts[1].isdigit() and parts[2].isdigit()):
            return None
        for gpu in gpus:
            if gpu.uuid == parts[0]:
                for dev, gi, ci in _migs(nv, gpu):
                    if (gi, ci) == (int(parts[1]), int(parts[2])):
                        return dev
        return None
    if token.startswith("MIG-"):
        hits = [dev for gpu in gpus for dev, _, _ in _migs(nv, gpu) if dev.uuid.startswith(token)]
        return hits[0] if len(hits) == 1 else None
    return None


def visible(nv, env: Mapping[str, str] | None = None) -> list[Device]:
    """The devices CUDA will show this process, in its order (an initialised NVML module)."""
    env = os.environ if env is None else env
    gpus = [_gpu(nv, i) for i in range(int(nv.nvmlDeviceGetCount()))]
    spec = env.get(ENV)
    if spec is None:
        return gpus
    out: list[Device] = []
    for token in spec.split(","):
        dev = _match(token.strip(), gpus, nv)
        if dev is None or dev.uuid in {d.uuid for d in out}:
            break
        out.append(dev)
    return out


def describe(env: Mapping[str, str] | None = None) -> str:
    """How the visible set came about, for an error message."""
    env = os.environ if env is None else env
    return f"{ENV}={env[ENV]!r}" if ENV in env else f"{ENV} unset"


@dataclass(frozen=True)
class WorkerPlan:
    jobs: int
    pins: tuple[str, ...]  # one CUDA_VISIBLE_DEVICES value per worker; () = workers not pinned


def plan_workers(jobs: int | None, gpu_ids: list[str], *, uses_gpu: bool, oversubscribe: bool = False,
                 env: Mapping[str, str] | None = None) -> WorkerPlan:
    """Worker count and pins of a sweep: one worker per visible GPU by default; a GPU
    suite with more workers than GPUs is refused unless oversubscribing is asked for
    (two engines on one card share its memory and time: every figure would be off)."""
    n = len(gpu_ids)
    if uses_gpu and not n:
        raise DeviceError(f"this sweep runs on a CUDA GPU and none is visible ({describe(env)})")
    jobs = jobs or max(1, n)
    if uses_gpu and jobs > n and not oversubscribe:
        raise DeviceError(f"-j {jobs} starts more workers than the {n} visible GPU(s) ({describe(env)}); "
                          f"use -j {max(1, n)} or add --oversubscribe to share GPUs between workers")
    if jobs < 2 or not gpu_ids:
        return WorkerPlan(jobs, ())
    return WorkerPlan(jobs, tuple(gpu_ids[i % n] for i in range(jobs)))


def order_warning(nv, env: Mapping[str, str] | None = None) -> str | None:
    """One line when CUDA_DEVICE_ORDER asks CUDA for another order than NVML's and the
    GPUs differ (of one model, FASTEST_FIRST ties break by bus id: the orders agree)."""
    env = os.environ if env is None else env
    value = env.get(ORDER)
    if nv is None or value is None or value == PCI_BUS_ID:
        return None
    names = sorted({_gpu(nv, i).name for i in range(int(nv.nvmlDeviceGetCount()))})
    if len(names) < 2:
        return None
    return (f"kvbench: warning: {ORDER}={value!r} orders CUDA's indices otherwise than NVML's on this machine "
            f"({', '.join(names)}); kvbench reads {ENV} in PCI bus order and starts its workers with "
            f"{ORDER}={PCI_BUS_ID}")


def check_order() -> str | None:
    """order_warning for this machine and environment (None without NVML)."""
    with nvml() as nv:
        return order_warning(nv)


@contextmanager
def pci_bus_order() -> Iterator[None]:
    """Workers started inside (xdist inherits this process's environment) number GPUs as
    NVML does, which is how kvbench read CUDA_VISIBLE_DEVICES and profiled the GPUs; the
    caller's environment is restored after."""
    before = os.environ.get(ORDER)
    os.environ[ORDER] = PCI_BUS_ID
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ORDER, None)
        else:
            os.environ[ORDER] = before
