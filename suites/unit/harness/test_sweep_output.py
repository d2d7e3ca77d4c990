"""What a sweep prints a newcomer: names at 80 columns, labelled progress, what next, the ids."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from harness.core.metrics import COLUMNS
from harness.grid.suites import load_suite
from harness.run.hardware import cpu_model
from harness.store.results import RunDir
from harness.view.summary import print_summary


def _rows():
    return [{"key": f"k{ps}", "test_id": f"spec:dflash-bs:16-profile:sglang-0.5.23-ps:{ps}-window:none",
             "verdict": "as_expected", "status": "violated", "violations": {"K8": 3},
             "metrics": {c.name: 1234 for c in COLUMNS}} for ps in (1, 16, 64)]


def _printed(width: int) -> str:
    buf = io.StringIO()
    print_summary(Console(file=buf, width=width), _rows(), RunDir(Path("/tmp/r1")), 10.0, "MLflow: off")
    return buf.getvalue()


def test_at_80_columns_every_config_keeps_its_name_and_its_labelled_figures():
    out = " ".join(_printed(80).split())
    for ps in (1, 16, 64):
        assert f"dflash ps{ps} bs16 0.5.23 nowin: as_expected; steps 1234" in out
    assert "peak stranded slots 1234" in out and "violations K8:3" in out
    wide = _printed(160)
    assert "│ dflash ps64 bs16 0.5.23 nowin │" in wide  # a wide terminal keeps the table


def _sized(width: int) -> str:
    rows = [{**r, "test_id": "model:qwen3-0.6b-" + r["test_id"],
             "config": {"model": "qwen3-0.6b", "spec": "dflash", "block_size": 16, "page_size": ps,
                        "input_len": 1024, "output_len": 256}} for r, ps in zip(_rows(), (1, 16, 64))]
    buf = io.StringIO()
    print_summary(Console(file=buf, width=width), rows, RunDir(Path("/tmp/r1")), 10.0, "MLflow: off")
    return buf.getvalue()


def test_a_config_with_a_model_shape_gets_its_capacity_per_gpu_at_any_width():
    """The capacity answer (harness/run/capacity.py) beside the figures: requests of the config's
    length that fit on an RTX 5090 / H100 / H200; the config keeps its name at 80 columns."""
    from harness.run.capacity import capacity

    want = {ps: "/".join(str(capacity({"model": "qwen3-0.6b", "spec": "dflash", "block_size": 16, "page_size": ps},
                                      1280, gpu).requests) for gpu in ("rtx5090", "h100", "h200"))
            for ps in (1, 16, 64)}
    narrow = " ".join(_sized(80).split())
    for ps in (1, 16, 64):
        assert f"dflash ps{ps} model=qwen3-0.6b bs16 0.5.23 nowin: as_expected; steps 1234" in narrow
        assert f"violations K8:3; requests fit 5090/H100/H200 {want[ps]}" in narrow
    assert max(len(line) for line in _sized(80).splitlines()) <= 80
    wide = _sized(160)
    assert "requests fit" in wide and all(f" {want[ps]} │\n" in wide for ps in (1, 16, 64))
    assert max(len(line) for line in wide.splitlines()) <= 160
    # 120 columns cannot hold the table and the capacity: labelled lines, nothing cropped
    assert f"requests fit 5090/H100/H200 {want[64]}" in " ".join(_sized(120).split())
    assert "requests fit" not in _printed(160)  # model none sizes no pool: no column of dashes


def test_the_rate_column_of_model_none_configs_is_named_the_planners_speed():
    out = " ".join(_printed(160).split())  # rows without a model are the accounting-only backend
    assert "out tokens/s: for the 3 configs of model none, the host planner's speed" in out
    assert "host planner" not in _sized(160)  # a real model's rate is its serving speed


def test_the_summary_ends_with_what_to_do_next():
    last = _printed(160).strip().splitlines()[-1]
    assert last == "next: kvbench ui (browse the runs) · kvbench compare r1 · kvbench report r1 --out report.html"


def test_the_cpu_model_comes_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9654 96-Core Processor\n")
    assert cpu_model(str(info)) == "AMD EPYC 9654 96-Core Processor"
    import platform

    # no cpuinfo (macOS): what platform says, never an error
    assert cpu_model(str(tmp_path / "absent")) == (platform.processor() or platform.machine())


def test_sweep_list_prints_the_ids_a_filter_selects(cli, capsys):
    assert cli("sweep", "smoke", "--list", "--filter", "eagle and ps=64 and profile=host-aligned") == 0
    out, err = capsys.readouterr()
    assert out.split() == ["spec:eagle-topk:1-steps:3-profile:host-aligned-ps:64-window:none",
                           "spec:eagle-topk:1-steps:3-profile:host-aligned-ps:64-window:64"]
    assert f"2 of {len(load_suite('smoke').configs)} configs of suite smoke" in err
