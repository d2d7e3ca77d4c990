"""CUDA_VISIBLE_DEVICES against a fake NVML of eight H200s: what a sweep counts, profiles
and pins on a shared runner, driven through the real detection and launch code."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

import pytest

from harness.run import devices, hardware
from harness.run.devices import DeviceError, plan_workers


@dataclass
class Handle:
    index: int
    uuid: str
    name: str
    total: int
    used: int = 1 << 30
    mig_mode: int | None = None  # None: not MIG-capable
    migs: list = field(default_factory=list)  # slots: Handle or None
    gi: int = 0
    ci: int = 0


class FakeNVML:
    """The pynvml calls kvbench makes, over `count` H200s; GPU 2 may be split into MIG instances."""

    NVML_DEVICE_MIG_ENABLE = 1

    class NVMLError(Exception):
        pass

    def __init__(self, count: int = 8, mig_on: int | None = None):
        self.gpus = [Handle(i, f"GPU-{i}{i}{i}{i}aaaa-0000-0000-0000-00000000000{i}", "NVIDIA H200",
                            141 << 30, used=(i + 1) << 30, mig_mode=0) for i in range(count)]
        if mig_on is not None:
            g = self.gpus[mig_on]
            g.mig_mode = 1
            g.migs = [Handle(mig_on, f"MIG-{k}bbbbbbb-1111-2222-3333-44444444444{k}", "NVIDIA H200 MIG 1g.18gb",
                             18 << 30, used=(10 + k) << 30, gi=7 + k, ci=0) for k in range(2)] + [None]

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        return self.gpus[i]

    def nvmlDeviceGetUUID(self, h):
        return h.uuid.encode()  # older pynvml returns bytes

    def nvmlDeviceGetName(self, h):
        return h.name

    def nvmlDeviceGetMemoryInfo(self, h):
        return type("Mem", (), {"total": h.total, "used": h.used})()

    def nvmlSystemGetDriverVersion(self):
        return "575.51"

    def nvmlDeviceGetMigMode(self, h):
        if h.mig_mode is None:
            raise self.NVMLError("Not Supported")
        return [h.mig_mode, h.mig_mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        return len(h.migs)

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, k):
        if h.migs[k] is None:
            raise self.NVMLError("Not Found")
        return h.migs[k]

    def nvmlDeviceGetGpuInstanceId(self, h):
        return h.gi

    def nvmlDeviceGetComputeInstanceId(self, h):
        return h.ci


@pytest.fixture
def fake(monkeypatch):
    nv = FakeNVML(8, mig_on=2)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return nv


def seen(nv, value):
    env = {} if value is None else {"CUDA_VISIBLE_DEVICES": value}
    return [(d.index, d.uuid, d.mig) for d in devices.visible(nv, env)]


def test_unset_means_every_gpu(fake):
    assert [i for i, _, _ in seen(fake, None)] == list(range(8))


def test_indices_select_and_order(fake):
    assert [i for i, _, _ in seen(fake, "4,5,6,7")] == [4, 5, 6, 7]
    assert [i for i, _, _ in seen(fake, " 7, 3")] == [7, 3]
    # CUDA ends the list at the first entry naming no device, or one already named.
    assert [i for i, _, _ in seen(fake, "1,x,2")] == [1]
    assert [i for i, _, _ in seen(fake, "1,9,2")] == [1]
    assert [i for i, _, _ in seen(fake, "1,1")] == [1]
    assert seen(fake, "-1") == []


def test_empty_means_no_gpu(fake, monkeypatch):
    assert seen(fake, "") == []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    hw = hardware.detect()
    assert (hw.profile, hw.gpu_count, hw.gpu_ids) == ("cpu", 0, [])
    assert hardware.nvml_used_bytes() is None
    plan = plan_workers(None, hw.gpu_ids, uses_gpu=False)
    assert (plan.jobs, plan.pins) == (1, ())
    with pytest.raises(DeviceError, match="none is visible"):
        plan_workers(None, hw.gpu_ids, uses_gpu=True, env={"CUDA_VISIBLE_DEVICES": ""})


def test_uuids_and_unique_prefixes_map_to_their_gpu(fake):
    six = fake.gpus[6].uuid
    assert seen(fake, six) == [(6, six, False)]
    assert seen(fake, f"{six[:10]},GPU-3333") == [(6, six, False), (3, fake.gpus[3].uuid, False)]
    assert seen(fake, "GPU-") == []  # a prefix of every UUID names no single GPU


def test_mig_ids_map_to_their_instance(fake, monkeypatch):
    second = fake.gpus[2].migs[1]
    assert seen(fake, second.uuid) == [(2, second.uuid, True)]
    # The form before driver R470: MIG-<parent GPU uuid>/<GPU instance>/<compute instance>.
    assert seen(fake, f"MIG-{fake.gpus[2].uuid}/7/0") == [(2, fake.gpus[2].migs[0].uuid, True)]
    assert seen(fake, f"MIG-{fake.gpus[2].uuid}/9/0") == []
    assert seen(fake, f"MIG-{fake.gpus[3].uuid}/7/0") == []  # GPU 3 is not in MIG mode
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", second.uuid)
    hw = hardware.detect()
    # The instance's own memory, not its parent's; the profile still names the GPU model.
    assert (hw.profile, hw.gpu_count, hw.memory_total_bytes) == ("h200", 1, 18 << 30)
    assert hardware.nvml_used_bytes() == 11 << 30


def test_profile_and_memory_come_from_the_visible_gpu(fake, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,6")
    hw = hardware.detect()
    assert (hw.profile, hw.gpu_count, hw.gpu_ids) == ("h200", 2, [fake.gpus[5].uuid, fake.gpus[6].uuid])
    assert hw.memory_used_bytes == 6 << 30 and hardware.nvml_used_bytes() == 6 << 30
    fake.gpus[5].name = "NVIDIA H100 80GB HBM3"
    assert hardware.detect().profile == "h100"  # GPU 0 of the machine is still an H200


def test_plan_defaults_to_one_worker_per_visible_gpu():
    ids = ["GPU-4", "GPU-5", "GPU-6", "GPU-7"]
    plan = plan_workers(None, ids, uses_gpu=True)
    assert (plan.jobs, plan.pins) == (4, tuple(ids))
    assert plan_workers(2, ids, uses_gpu=True).pins == ("GPU-4", "GPU-5")
    assert plan_workers(None, ["GPU-0"], uses_gpu=True) == devices.WorkerPlan(1, ())
    assert plan_workers(3, [], uses_gpu=False) == devices.WorkerPlan(3, ())  # a CPU machine
    assert plan_workers(3, ["GPU-0", "GPU-1"], uses_gpu=True, oversubscribe=True).pins == ("GPU-0", "GPU-1", "GPU-0")
    # A CPU suite on a GPU machine may run more workers than GPUs: its configs never touch one.
    assert plan_workers(4, ["GPU-0"], uses_gpu=False).jobs == 4


def test_more_workers_than_gpus_is_refused():
    with pytest.raises(DeviceError) as err:
        plan_workers(8, ["GPU-0"], uses_gpu=True, env={"CUDA_VISIBLE_DEVICES": "0"})
    msg = str(err.value)
    assert "\n" not in msg and "-j 8" in msg and "1 visible GPU" in msg and "--oversubscribe" in msg


class Launched(Exception):
    pass


def test_sweep_on_gpus_4_to_7_pins_four_workers(fake, monkeypatch, results_root, cli):
    """The real `kvbench sweep nightly-gpu` up to the pytest launch, on a runner given GPUs 4-7."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    launched = {}

    def main(args, plugins=()):  # kvbench sweep runs pytest in-process with its plugin
        launched["cmd"] = list(args)
        raise Launched

    monkeypatch.setattr(pytest, "main", main)
    with pytest.raises(Launched):
        cli("sweep", "nightly-gpu", "--no-mlflow")
    cmd = launched["cmd"]
    txs = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--tx"]
    assert txs == [f"popen//env:CUDA_VISIBLE_DEVICES={fake.gpus[i].uuid}" for i in (4, 5, 6, 7)]
    import execnet  # how xdist reads a --tx: each worker starts with exactly its GPU visible

    assert [execnet.XSpec(t).env for t in txs] == [{"CUDA_VISIBLE_DEVICES": fake.gpus[i].uuid} for i in (4, 5, 6, 7)]


def test_sweep_with_more_workers_than_gpus_exits_2_with_one_line(fake, monkeypatch, results_root, cli, capsys):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setattr(pytest, "main", lambda *a, **k: pytest.fail("no worker may start"))
    assert cli("sweep", "nightly-gpu", "-j", "8", "--no-mlflow") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "-j 8" in err and "--oversubscribe" in err
    assert not any(results_root.rglob("meta.json"))  # refused before any run directory


def _launch(cli, monkeypatch, *args):
    """The real `kvbench sweep` up to the pytest launch: the environment its workers inherit."""
    launched = {}

    def main(cmd, plugins=()):
        launched["order"] = os.environ.get("CUDA_DEVICE_ORDER")
        raise Launched

    monkeypatch.setattr(pytest, "main", main)
    with pytest.raises(Launched):
        cli("sweep", *args, "--no-mlflow")
    return launched["order"]


@pytest.mark.parametrize("gpus", ["4,5,6,7", "3"])  # pinned workers (--tx env) and one unpinned (-n)
def test_workers_number_gpus_in_pci_bus_order(fake, monkeypatch, results_root, cli, capsys, gpus):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", gpus)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    assert _launch(cli, monkeypatch, "nightly-gpu") == "PCI_BUS_ID"
    assert "CUDA_DEVICE_ORDER" not in os.environ  # the caller's environment is left as it was
    assert "warning" not in capsys.readouterr().err


def test_another_order_on_mixed_gpus_warns_in_one_line(fake, monkeypatch, results_root, cli, capsys):
    fake.gpus[1].name = "NVIDIA H100 80GB HBM3"  # CUDA's FASTEST_FIRST would number it apart
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    assert _launch(cli, monkeypatch, "nightly-gpu") == "PCI_BUS_ID"
    assert os.environ["CUDA_DEVICE_ORDER"] == "FASTEST_FIRST"
    warnings = [line for line in capsys.readouterr().err.splitlines() if "CUDA_DEVICE_ORDER" in line]
    assert len(warnings) == 1 and warnings[0].startswith("kvbench: warning: CUDA_DEVICE_ORDER='FASTEST_FIRST'")
    assert "NVIDIA H100 80GB HBM3, NVIDIA H200" in warnings[0] and "PCI_BUS_ID" in warnings[0]


def test_another_order_on_one_gpu_model_is_no_warning(fake, monkeypatch):
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    assert devices.order_warning(fake) is None  # every GPU an H200: the two orders agree
    fake.gpus[7].name = "NVIDIA H100 80GB HBM3"
    assert "FASTEST_FIRST" in devices.order_warning(fake)
    assert devices.order_warning(fake, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}) is None
    assert devices.order_warning(fake, {}) is None
    assert devices.order_warning(None) is None  # no driver
