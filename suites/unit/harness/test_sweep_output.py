"""What a sweep prints a newcomer: names at 80 columns, labelled progress, what next, the ids."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from harness.hardware import cpu_model
from harness.metrics import COLUMNS
from harness.results import RunDir
from harness.summary import print_summary


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
    assert "2 of 53 configs of suite smoke" in err
