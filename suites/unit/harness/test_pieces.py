"""Hardware profiles, the pytest arguments a sweep builds, plots, idempotent MLflow logging."""

from __future__ import annotations

import mmap

import pytest

from harness.grid.suites import load_suite
from harness.grid.sweep import pytest_args
from harness.run import hardware
from harness.store.results import RunDir, append_row
from harness.view.mlflow_log import all_children, client, ensure_experiment, ensure_parent, key_hash, log_row, sync


@pytest.mark.parametrize("name, profile", [
    (None, "cpu"), ("NVIDIA GeForce RTX 5090", "rtx5090"), ("NVIDIA H100 80GB HBM3", "h100"),
    ("NVIDIA H200", "h200"), ("Tesla T4", "gpu-tesla-t4"),
])
def test_profiles_from_gpu_names(name, profile):
    assert hardware.profile_for(name) == profile


def test_cpu_machine_detects_cpu_profile_and_measures_rss():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this test is about a machine without a GPU")
    hw = hardware.detect()
    assert hw.profile == "cpu" and hw.gpu_name is None and hw.torch_version
    with hardware.MemoryProbe() as probe:
        # A fresh anonymous mapping, not the heap: malloc may hand back pages an earlier
        # test already made resident, and then RSS would not grow.
        blob = mmap.mmap(-1, 32 << 20)
        for off in range(0, len(blob), mmap.PAGESIZE):
            blob[off] = 1  # touch every page: resident, not just reserved
    figures = probe.figures()
    assert figures["mem_rss_bytes"] > figures["mem_rss_growth_bytes"] >= len(blob) * 3 // 4
    blob.close()
    # No process-lifetime peak: in a sweep it depends on which config ran before.
    assert "mem_peak_rss_bytes" not in figures and "mem_torch_peak_bytes" not in figures


def test_sweep_pins_one_worker_per_gpu():
    cmd = pytest_args(jobs=4, filter_expr="dflash", pins=("GPU-a", "GPU-b", "GPU-c", "GPU-d"))
    txs = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--tx"]
    assert txs == [f"popen//env:CUDA_VISIBLE_DEVICES=GPU-{c}" for c in "abcd"]
    assert "--kvbench-filter=dflash" in cmd and "-k" not in cmd and "-n" not in cmd
    cpu = pytest_args(jobs=2, filter_expr=None, pins=())
    assert cpu[cpu.index("-n") + 1] == "2" and "--tx" not in cpu
    one = pytest_args(jobs=1, filter_expr=None, pins=())
    assert one[one.index("-n") + 1] == "1"  # even one worker: a crashing config never takes the sweep down


def fake_row(i: int, **over) -> dict:
    ps, policy = 16 * (i // 2 + 1), ["aligned", "unaligned"][i % 2]
    row = {"key": f"spec=dflash,ps={ps},policy={policy}", "test_id": f"ps:{ps}-policy:{policy}",
           "config": {"spec": "dflash", "page_size": ps, "policy": policy,
                      "block_size": 16, "window": None},
           "metrics": {"steps": 10 + i, "peak_stranded_slots": i, "leaked_pages": i % 2, "output_tokens_per_s": 100.0 * i,
                       "peak_reserved_slots": 5 * i, "rss_peak_bytes": 1e8},
           "series": {"stranded": list(range(600)), "held": [1, 2, 3]}, "violations": {"K1": i} if i else {},
           "status": "violated" if i else "ok", "verdict": "ok", "suite": "unit"}
    row.update(over)
    return row


def test_plots_are_written(tmp_path):
    from harness.view.plots import write_plots

    rows = [fake_row(i) for i in range(4)] + [fake_row(9, status="failed", metrics={})]
    names = {p.name for p in write_plots(rows, tmp_path / "plots")}
    assert {"peak_stranded_slots_heatmap.png", "leaked_tokens_heatmap.png", "reserved_overhead.png",
            "timings_vs_page_size.png", "memory_vs_page_size.png"} <= names
    assert all((tmp_path / "plots" / n).stat().st_size > 1000 for n in names)


def test_plots_draw_like_with_like():
    # A dedup free never leaks and a real-model run reserves for its own workload:
    # folding either into the host_pages or accounting-only figures drew numbers
    # no config measured (a negative alignment overhead, 7 of 11 leaked pages).
    from harness.view.plots import alignment_overhead, heatmap_cells

    def row(policy, free="host_pages", model="none", reserved=0, leaked=0):
        return {"config": {"spec": "dflash", "block_size": 16, "page_size": 16, "policy": policy,
                           "free_policy": free, "model": model, "num_requests": 4},
                "metrics": {"peak_reserved_slots": reserved, "leaked_pages": leaked, "peak_running": 4},
                "status": "ok"}

    rows = [row("aligned", reserved=100), row("unaligned", reserved=68, leaked=4),
            row("unaligned", free="dedup", reserved=68), row("aligned", model="tiny", reserved=10),
            row("unaligned", leaked=9) | {"status": "failed"}]
    assert alignment_overhead(rows) == {("dflash", 16): [(32.0, 0.5)]}  # 32 slots over 4 requests of 16-slot pages
    cells = heatmap_cells(rows, "leaked_pages")
    assert cells[("dflash", "unaligned", "host_pages")] == {(16, 16): 4.0}
    assert cells[("dflash", "unaligned", "dedup")] == {(16, 16): 0.0}


def test_sync_is_idempotent_and_replaces_half_logged_children(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run = RunDir(tmp_path / "runs" / "x")
    run.path.mkdir(parents=True)
    meta = {"suite": "unit", "mlflow_uri": uri, "hardware": {"profile": "cpu"}}
    run.write_meta(meta)
    rows = [fake_row(i) for i in range(3)]
    for r in rows:
        append_row(run.results, r)
    cl = client(uri)
    exp = ensure_experiment(cl, "kvbench-unit", uri, tmp_path)
    parent = ensure_parent(cl, exp, "x", meta)
    assert log_row(cl, exp, parent, "x", rows[0], "ps:16")
    # A process killed mid-upload leaves a child that never finished.
    half = cl.create_run(exp, tags={"mlflow.parentRunId": parent, "kvbench.run": "x", "kvbench.role": "config",
                                    "kvbench.key_hash": key_hash(rows[1]["key"])})
    # The store is named, as a user names it: sync never takes meta.json's, and an earlier
    # test's mlflow.set_tracking_uri may have left $MLFLOW_TRACKING_URI set in this worker.
    assert sync(run, uri, root=tmp_path) == (2, 1)
    assert sync(run, uri, root=tmp_path) == (0, 3)
    kids = all_children(cl, exp, "x")
    assert sorted(len(v) for v in kids.values()) == [1, 1, 1]
    assert all(v[0].info.status == "FINISHED" for v in kids.values())
    assert cl.get_run(half.info.run_id).info.lifecycle_stage == "deleted"
    one = kids[key_hash(rows[0]["key"])][0]
    history = cl.get_metric_history(one.info.run_id, "memory/series/stranded")
    assert len(history) <= 257 and history[-1].step == 599  # downsampled, last step kept
    assert one.data.params["policy"] == "aligned" and one.data.metrics["engine/steps"] == 10
    two = cl.get_run(kids[key_hash(rows[1]["key"])][0].info.run_id)
    assert two.data.metrics["invariants/K1"] == 1 and two.data.tags["kvbench.status"] == "violated"
    assert run.logged_keys() == {r["key"] for r in rows}
    assert {a.path for a in cl.list_artifacts(one.info.run_id)} == {"row.json", "series.svg"}


def test_ui_without_a_store_is_one_line(results_root, cli, capsys):
    assert cli("ui") == 2
    err = capsys.readouterr().err.strip()
    assert "no local MLflow store" in err and len(err.splitlines()) == 1


def test_a_crashing_config_is_recorded_failed_and_the_next_one_runs(tmp_path):
    from harness.grid.execute import GridSession
    from harness.store.results import load_rows

    suite_file = tmp_path / "crash.toml"
    # pool_tokens=64 validates as an option but cannot hold one 256-token request: the run itself fails.
    suite_file.write_text('[defaults]\nworkload = "fixed"\nnum_requests = 2\ninput_len = 256\noutput_len = 8\n'
                          '[axes]\npool_tokens = [64, 4096]\n')
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    session = GridSession(load_suite(suite_file), run)
    verdicts = [session.run(gc)["verdict"] for gc in session.suite.configs]
    assert verdicts == ["failed", "ok"]
    rows = load_rows(run.path)
    assert rows[0]["status"] == "failed" and "pool" in rows[0]["error"]
    assert rows[0]["reasons"][0].startswith("run failed:")


class FakeNVML:
    """Stands in for pynvml's module on a GPU machine: the calls detect() makes."""

    class NVMLError(Exception):
        pass

    def __init__(self, name: str, count: int = 8):
        self.name, self.count, self.inits = name, count, 0

    def nvmlInit(self):
        self.inits += 1

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i):
        assert 0 <= i < self.count
        return i

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{h:08x}-fake"

    def nvmlDeviceGetName(self, h):
        return self.name.encode()

    def nvmlSystemGetDriverVersion(self):
        return "575.51"

    def nvmlDeviceGetMemoryInfo(self, h):
        return type("Mem", (), {"total": 141 << 30, "used": 2 << 30})()


def test_detect_reads_the_gpu_through_nvml(monkeypatch):
    import sys

    fake = FakeNVML("NVIDIA H200")
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    hw = hardware.detect()
    assert (hw.profile, hw.gpu_name, hw.gpu_count, hw.driver) == ("h200", "NVIDIA H200", 1, "575.51")
    assert hw.gpu_ids == ["GPU-00000003-fake"]
    assert hw.memory_total_bytes == 141 << 30 and hardware.nvml_used_bytes() == 2 << 30


def test_no_driver_means_cpu(monkeypatch):
    import sys

    fake = FakeNVML("x")

    def fail():
        raise FakeNVML.NVMLError("NVML Shared Library Not Found")

    fake.nvmlInit = fail
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert hardware.detect().profile == "cpu" and hardware.nvml_used_bytes() is None


def test_large_sweeps_print_one_line_per_algorithm_and_policy():
    from harness.view.summary import group_rows

    rows = [fake_row(i) for i in range(4)]
    lines = group_rows(rows)
    assert [line[:4] for line in lines] == [["dflash", "aligned", "None", "2"], ["dflash", "unaligned", "None", "2"]]
    unaligned = lines[1]
    assert unaligned[-4:] == ["3", "2", "0", "K1:4"]  # max stranded, leaked (1 + 1), predicted, K1 (1 + 3)


def test_a_config_whose_worker_died_is_recorded_failed(tmp_path):
    from types import SimpleNamespace

    from harness.grid.plugin import GridController
    from harness.store.results import load_rows

    suite = load_suite("smoke", validate=False)
    run = RunDir(tmp_path)
    first, second, third = suite.configs[:3]
    node = lambda gc: f"suites/grid/test_grid.py::test_config[{gc.id}]"  # noqa: E731
    append_row(run.results, {"key": first.spec.key, "status": "ok", "verdict": "ok"})
    controller = GridController(suite, run)
    assert controller.worker_input()["done"] == [first.spec.key]  # what workers deselect
    # xdist's report of a worker killed (OOM, segfault) while it ran the second config
    controller.pytest_runtest_logstart(node(second), None)
    controller.pytest_handlecrashitem(node(second), None, None)
    controller.pytest_runtest_logreport(SimpleNamespace(nodeid=node(second), when="???", failed=True, skipped=False))
    # the third started and never reported: found lost when the session ends
    controller.pytest_runtest_logstart(node(third), None)
    controller.pytest_sessionfinish(SimpleNamespace(exitstatus=1))
    rows = load_rows(tmp_path)
    assert [(r["key"], r["verdict"]) for r in rows] == [(gc.spec.key, v) for gc, v in
                                                      ((first, "ok"), (second, "failed"), (third, "failed"))]
    assert all("worker" in r["error"] and r["reasons"] == ["worker died"] for r in rows[1:])
    controller.pytest_sessionfinish(SimpleNamespace(exitstatus=1))  # once only
    assert len(run.rows()) == 3
