"""The memory layer is pure numpy, and the accounting-only engine needs no torch.

Each check runs in a fresh interpreter where `import torch` fails (a None entry in
sys.modules blocks the import), so anything on those paths that imports torch,
even lazily, fails the test.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

BLOCK_TORCH = "import sys\nsys.modules['torch'] = None\n"


def run_without_torch(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK_TORCH + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=300)


def test_the_block_really_stops_torch():
    got = run_without_torch("import torch")
    assert got.returncode != 0 and "ModuleNotFoundError" in got.stderr


def test_memory_imports_without_torch():
    got = run_without_torch("""
        import mini_engine.memory.manager, mini_engine.memory.sizing, mini_engine.memory.batch, mini_engine.memory.replay.run
        print(mini_engine.memory.sizing.ceil_ps(37, 16))
    """)
    assert got.returncode == 0, got.stderr
    assert got.stdout.split() == ["48"]


def test_accounting_only_runs_without_torch(tmp_path):
    # DFLASH with SWA layers and PD arrivals, audited, with a trace: every memory-layer
    # writer and check runs, and the accounting-only backend writes no device tensor.
    got = run_without_torch(f"""
        from harness.run.runner import run_config
        row = run_config({{"page_size": 16, "spec": "dflash", "block_size": 16, "window": 64,
                          "layer_pattern": "1:1", "workload": "pd", "pd_fraction": 0.5,
                          "num_requests": 12, "input_len": 96, "output_len": 64}},
                         trace={str(tmp_path / "t.jsonl")!r})
        m = row["metrics"]
        print(row["status"], m["output_tokens"], m["leaked_pages"], sum(row["violations"].values()))
        import sys
        print("torch" in sys.modules and sys.modules["torch"] is not None)
    """)
    assert got.returncode == 0, got.stderr
    status, tokens, leaked, violations, torch_loaded = got.stdout.split()
    assert status == "ok" and int(tokens) > 0 and leaked == "0" and violations == "0"
    assert torch_loaded == "False"
    assert '"op":"prepare"' in (tmp_path / "t.jsonl").read_text()
