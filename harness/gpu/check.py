"""The GPU check (`ci/gpu-check.sh`): everything GPU-side of kvbench, run once on one CUDA
machine, figures and failures written under one directory.

It needs torch, triton and pytest, no network and no install (`PYTHONPATH=.` from a
checkout). Steps, each recorded with its status, time and a log; a failing step
never stops the ones after it:

  pytest    `pytest -m gpu suites/gpu` (junit xml)
  nightly   a slice of the nightly-gpu suite through `python -m harness.cli sweep`;
            needs the harness extra (pydantic, rich), skipped with the reason without it
  k11       lossless speculative decoding (EAGLE chain and tree, DFLASH) with the
            Triton kernels on the device: outputs equal plain greedy decoding
  decode    decode throughput of the qwen3-0.6b shape (bf16) at batch 1, 64, 256,
            plain and each algorithm: tau and the fraction of the HBM roofline
  kernel    the Triton paged-decode kernel's bandwidth against SDPA over gathered pages

`--dry-run` runs the same steps on the CPU with tiny shapes (Triton's interpreter,
the CPU smoke suite for the sweep), to check the plumbing anywhere.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import subprocess
import sys
import time
import traceback
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from harness import ROOT
from harness.core import roles
from harness.run import hardware
from harness.store.results import read_jsonl
from mini_engine.config.engine_config import EngineConfig
from mini_engine.request import Request

STEPS = ("pytest", "nightly", "k11", "decode", "kernel")


@dataclass(frozen=True)
class Plan:
    """What each step runs: the GPU plan, or tiny CPU shapes for --dry-run."""

    device: str
    suite: str
    suite_filter: str
    k11_model: str
    k11_requests: int
    k11_output: int
    k11_attention: tuple[str, ...]  # triton-token, triton-auto (the Triton kernels), torch
    shape: str
    batches: tuple[int, ...]
    prompt_len: int
    output_len: int
    kernel_shape: str
    kernel_batches: tuple[int, ...]
    kernel_ctx: int
    kernel_iters: int
    step_timeout_s: int


GPU = Plan("cuda", "nightly-gpu", "qwen3 and ps:16 and not win and not profile and not run and (bs:16 or topk:1)",
           "tiny", 8, 32, ("triton-token", "triton-auto"), "qwen3-0.6b", (1, 64, 256), 512, 64,
           "qwen3-0.6b", (1, 64, 256), 1024, 50, 240)
DRY = Plan("cpu", "smoke", "dflash and profile:sglang-0.5.23 and ps:16 and win:none and not model",
           "tiny", 2, 4, ("torch",), "tiny", (1, 2), 16, 4,
           "tiny", (1, 2), 32, 1, 120)
# The dry run's K11 uses torch attention: Triton's interpreter would take minutes over a
# whole engine run (the kernels are checked against torch by the unit tests instead).


class Check:
    def __init__(self, out: Path, plan: Plan, dry_run: bool, peak_bw: float | None):
        self.out, self.plan, self.dry_run = out, plan, dry_run
        self.peak_bw = peak_bw
        self.summary: dict[str, Any] = {"dry_run": dry_run, "steps": {}}
        self.t0 = time.time()

    def say(self, msg: str) -> None:
        print(f"[gpu-check {time.time() - self.t0:6.1f}s] {msg}", flush=True)

    def step(self, name: str, fn: Callable[[], tuple[str, Any]]) -> None:
        """Run one step; its status, seconds and result (or the error) go to the summary."""
        self.say(f"{name} ...")
        t = time.time()
        try:
            status, result = fn()
        except Exception as err:
            (self.out / f"{name}.log").write_text(traceback.format_exc())
            status, result = "failed", {"error": f"{type(err).__name__}: {err}", "log": f"{name}.log"}
        rec = {"status": status, "seconds": round(time.time() - t, 1), "result": result}
        self.summary["steps"][name] = rec
        self.say(f"{name}: {status} ({rec['seconds']} s)")
        self.write()

    def write(self) -> None:
        steps = self.summary["steps"].values()
        self.summary["ok"] = all(s["status"] in ("ok", "skipped") for s in steps)
        self.summary["wall_s"] = round(time.time() - self.t0, 1)
        tmp = self.out / "summary.json.tmp"
        tmp.write_text(json.dumps(self.summary, indent=2, default=str) + "\n")
        tmp.replace(self.out / "summary.json")

    # -- subprocess steps ----------------------------------------------------

    def _env(self) -> dict[str, str]:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        if self.dry_run:
            env["CUDA_VISIBLE_DEVICES"] = ""  # the GPU tests skip, the sweep runs its CPU suite
        return env

    def _run(self, name: str, cmd: list[str], env: dict[str, str]) -> int:
        with (self.out / f"{name}.log").open("w") as log:
            log.write("$ " + " ".join(cmd) + "\n")
            log.flush()
            try:
                return subprocess.run(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                      timeout=self.plan.step_timeout_s).returncode
            except subprocess.TimeoutExpired:
                log.write(f"\ngpu-check: stopped after {self.plan.step_timeout_s} s\n")
                return 124

    def pytest(self) -> tuple[str, Any]:
        xml = self.out / "pytest-gpu.xml"
        marks = "gpu" if has("pytest_benchmark") else "gpu and not bench"  # bench tests need the fixture
        cmd = [sys.executable, "-m", "pytest", "suites/gpu", "-m", marks, "-q", "-rfEs", "-p", "no:cacheprovider",
               f"--junitxml={xml}"]
        if has("xdist"):
            cmd += ["-n", "0"]
        rc = self._run("pytest", cmd, self._env())
        counts = junit_counts(xml)
        counts.update(rc=rc, marks=marks, junit=xml.name, log="pytest.log")
        return ("ok" if rc in (0, 5) else "failed"), counts  # 5: nothing collected

    def nightly(self) -> tuple[str, Any]:
        # What `kvbench sweep` itself checks before it starts (the harness role), so a
        # machine without the harness extra reads as a skip naming it, not a failed rc 2.
        missing = [m for m in roles.ROLE_PACKAGES["harness"] if not roles.installed(m)]
        if missing:
            return "skipped", {"reason": f"kvbench sweep needs the harness extra ({', '.join(missing)} "
                                         f"not installed): pip install -e '.[harness]'"}

        run_id = f"gpu-check-{time.strftime('%Y%m%d-%H%M%S')}"
        cmd = [sys.executable, "-m", "harness.cli", "sweep", self.plan.suite, "--filter", self.plan.suite_filter,
               "-j", "1", "--run-id", run_id]
        if not has("mlflow"):
            cmd.append("--no-mlflow")
        env = dict(self._env(), KVBENCH_RESULTS=str(self.out / "results"))
        rc = self._run("nightly", cmd, env)
        rows_file = self.out / "results" / "runs" / run_id / "results.jsonl"
        rows = read_jsonl(rows_file)  # [] when the sweep wrote none; a torn last line is skipped
        configs = [{"id": r.get("test_id"), "verdict": r.get("verdict"), "status": r.get("status"),
                    "tau": (r.get("metrics") or {}).get("tau"),
                    "output_tokens_per_s": (r.get("metrics") or {}).get("output_tokens_per_s")} for r in rows]
        result = {"rc": rc, "suite": self.plan.suite, "filter": self.plan.suite_filter, "run_id": run_id,
                  "results": str(rows_file.relative_to(self.out)), "configs": configs, "log": "nightly.log"}
        return ("ok" if rc == 0 and configs else "failed"), result

    # -- in-process steps ----------------------------------------------------

    def k11(self) -> tuple[str, Any]:
        import numpy as np  # numpy: optional, loaded only on this path

        from mini_engine.engine import Engine  # numpy: optional, loaded only on this path
        from mini_engine.model.backend import ModelBackend  # numpy, torch: optional, loaded only on this path

        p = self.plan
        rng = np.random.default_rng(0)
        prompts = [rng.integers(0, 1024, int(rng.integers(8, 48))).tolist() for _ in range(p.k11_requests)]

        def run(spec: dict, attention: str) -> dict:
            cfg = EngineConfig(model=p.k11_model, device=p.device, page_size=16, pool_tokens=1 << 14,
                               max_context=512, window=32, layer_pattern="3:1", audit="raise", **spec)
            backend = ModelBackend(cfg, dtype="float64", attention=attention.split("-")[0])
            if attention.startswith("triton-"):  # before setup, so that the drafter attends alike
                # numpy, torch, triton: optional, loaded only on this path
                from mini_engine.model.attention_triton import triton_paged_attention

                backend.attend = functools.partial(triton_paged_attention, kernel=attention.split("-")[1])
            reqs = [Request(rid=i, prompt=x, max_new_tokens=p.k11_output) for i, x in enumerate(prompts)]
            res = Engine(cfg, backend=backend).run(reqs)
            return {"outputs": res.outputs, "tau": res.stats["tau"], "verdict": res.verdict}

        checks = []
        for attention in p.k11_attention:
            base = run({}, attention)
            for name, spec in (("eagle-chain", dict(spec="eagle", topk=1, steps=3)),
                               ("eagle-tree", dict(spec="eagle", topk=4, steps=3, num_draft_tokens=8)),
                               ("dflash", dict(spec="dflash", block_size=8))):
                got = run(spec, attention)
                same = sum(got["outputs"][i] == base["outputs"][i] for i in base["outputs"])
                checks.append({"algo": name, "attention": attention, "lossless": got["outputs"] == base["outputs"],
                               "requests_equal": same, "requests": len(base["outputs"]), "tau": got["tau"],
                               "verdict": got["verdict"]})
        ok = all(c["lossless"] and c["verdict"] == "ok" for c in checks)
        return ("ok" if ok else "failed"), {"model": p.k11_model, "dtype": "float64", "checks": checks}

    def decode(self) -> tuple[str, Any]:
        # numpy, torch: optional, loaded only on this path
        from harness.gpu.perf import ALGOS, Workload, decode_throughput

        p = self.plan
        rows = []
        for batch in p.batches:
            for algo in ALGOS:
                w = Workload(p.shape, batch, p.prompt_len, p.output_len, p.device)
                rows.append(decode_throughput(w, algo, self.peak_bw))
                r = rows[-1]
                self.say(f"  decode {p.shape} batch {batch} {algo}: {fmt(r['decode_tokens_per_s'])} tok/s, "
                         f"tau {r['tau']:.2f}, roofline {fmt(r['roofline_fraction'])}")
        ok = all(r["verdict"] == "ok" for r in rows)
        return ("ok" if ok else "failed"), {"peak_bytes_per_s": self.peak_bw, "runs": rows}

    def kernel(self) -> tuple[str, Any]:
        from harness.gpu.perf import kernel_bandwidth  # numpy, torch: optional, loaded only on this path

        p = self.plan
        rows = [kernel_bandwidth(p.kernel_shape, b, p.kernel_ctx, p.device, self.peak_bw, p.kernel_iters)
                for b in p.kernel_batches]
        for r in rows:
            self.say(f"  kernel batch {r['batch']} ctx {r['ctx']}: triton {fmt(r['triton_bytes_per_s'] / 1e9)} GB/s, "
                     f"sdpa {fmt(r['sdpa_bytes_per_s'] / 1e9)} GB/s")
        # The two must agree before their speeds mean anything (bf16 inputs, float32 sums).
        ok = all(r["max_abs_diff"] < 2e-2 for r in rows)
        return ("ok" if ok else "failed"), {"peak_bytes_per_s": self.peak_bw, "runs": rows}


def has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3g}"


def junit_counts(xml: Path) -> dict[str, int]:
    if not xml.exists():
        return {}
    root = ET.parse(xml).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    return {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}


def machine(device: str, peak_override: float | None) -> dict[str, Any]:
    import torch  # torch: optional, loaded only on this path

    from harness.gpu.perf import peak_bandwidth  # numpy, torch: optional, loaded only on this path

    hw = hardware.detect().to_dict()
    name = torch.cuda.get_device_name(0) if device == "cuda" else None
    peak = peak_override or peak_bandwidth(name or hw.get("gpu_name"))
    return {"device": device, "device_name": name, "hardware": hw, "peak_bytes_per_s": peak,
            "peak_source": "--peak-gbs" if peak_override else ("table" if peak else "unknown device"),
            "torch": torch.__version__, "cuda": torch.version.cuda,
            "triton": hw.get("triton_version"), "python": sys.version.split()[0]}


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="gpu-check", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="tiny shapes on the CPU: check the plumbing")
    ap.add_argument("--out", default=os.environ.get("OUT") or "gpu-check-out", help="output directory ($OUT)")
    ap.add_argument("--only", default=",".join(STEPS), help=f"comma list of steps ({', '.join(STEPS)})")
    ap.add_argument("--peak-gbs", type=float, default=None, help="peak memory bandwidth in GB/s (unknown GPUs)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    bad = [s for s in only if s not in STEPS]
    if bad or not only:
        print(f"gpu-check: error: --only takes steps from {', '.join(STEPS)} (got {args.only!r})", file=sys.stderr)
        return 2
    if args.peak_gbs is not None and not args.peak_gbs > 0:
        print(f"gpu-check: error: --peak-gbs must be a number > 0 (got {args.peak_gbs})", file=sys.stderr)
        return 2
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"  # read when the kernels are defined: before any import of them
    import torch  # torch: optional, loaded only on this path

    if not args.dry_run and not torch.cuda.is_available():
        print("gpu-check: error: no CUDA device is visible; run it on a GPU machine or pass --dry-run",
              file=sys.stderr)
        return 2
    plan = DRY if args.dry_run else GPU
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.dry_run:
        torch.set_num_threads(1)  # tiny matmuls: thread handoffs cost more than they save
    check = Check(out, plan, args.dry_run, args.peak_gbs * 1e9 if args.peak_gbs else None)
    check.summary["machine"] = machine(plan.device, check.peak_bw)
    check.peak_bw = check.summary["machine"]["peak_bytes_per_s"]
    check.say(f"writing to {out}; device {check.summary['machine']['device_name'] or plan.device}, "
              f"peak {fmt(check.peak_bw and check.peak_bw / 1e9)} GB/s")
    for name in STEPS:
        if name in only:
            check.step(name, getattr(check, name))
    check.write()
    check.say(f"{'all steps passed' if check.summary['ok'] else 'some steps FAILED'}; summary: {out / 'summary.json'}")
    return 0 if check.summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
