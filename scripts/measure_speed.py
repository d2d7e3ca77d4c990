"""Measure kvbench's speed figures on this machine, optionally against a second checkout.

    python scripts/measure_speed.py                     # this checkout: vs-HF, step costs, smoke sweep
    python scripts/measure_speed.py --pytest            # also `python -m pytest -n 2` (long)
    python scripts/measure_speed.py --base ../main      # before/after, interleaved round by round
    python scripts/measure_speed.py --walls             # only the two walls below, once each (minutes)
    python scripts/measure_speed.py --walls --base ../main --rounds 2

Figures (medians of --rounds rounds, default 3):

* vs-HF decode: `kvbench run --spec none --page-size 16` (run_config, audit at its
  default, kvbench's own thread choice) against HF `generate()` at torch's default
  thread count and at kvbench's, on suites/bench/test_bench_vs_hf.py's checkpoint and
  prompts (batch 1, 16, 64); the ratio is against the faster HF setting, per round.
* spec step cost at batch 64: the median wall of an engine step whose forward is a
  VERIFY (EAGLE chain topk 1 / 3 steps, DFLASH block 4) over the median plain DECODE
  step of the same round (scheduler, audit and model together, as a user pays them),
  and the same ratio per matmul FLOP (the step's FLOPs counted where the model code
  runs its projections, MLPs, LM heads and the drafter's fc): 1.0 is a speculative
  step that costs what its FLOPs cost in a plain step.
* `kvbench sweep smoke --no-mlflow` wall and, with --pytest, `python -m pytest -n 2`
  (the README's test command). --walls measures only these two, without the vs-HF and
  step-cost rounds, and prints each round's figures as they come.

Each round runs every checkout once, one after the other, each in a fresh process
(`--child`), so before and after see the same machine load. Timings on a shared
machine are only good relative to each other: read the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
BATCHES = (1, 16, 64)
STEP_ALGOS = {"plain": dict(spec="none"), "eagle-chain": dict(spec="eagle", topk=1, steps=3),
              "dflash": dict(spec="dflash", block_size=4)}


# -- the child: one round of the in-process figures for the checkout on sys.path ------------

def child(ckpt: Path, files: dict[int, Path]) -> dict:
    import torch

    # test_bench_vs_hf reads torch's default thread count when imported: before any run lowers it.
    sys.argv = sys.argv[:1]
    from suites.bench import test_bench_vs_hf as vs

    model = vs.transformers.LlamaForCausalLM.from_pretrained(ckpt).to(torch.float32).eval()
    model.generation_config.eos_token_id = None
    prompts = [json.loads(line)["prompt"] for line in files[max(BATCHES)].read_text().splitlines()]
    out: dict = {"default_threads": vs.DEFAULT_THREADS}
    for b in BATCHES:
        vs.kvbench_run(ckpt, files[b], "plain")  # warm-up: kernels loaded, first-call allocations
        kv_tps, kv_out, _ = vs.kvbench_run(ckpt, files[b], "plain")
        kv_threads = torch.get_num_threads()
        hf = {}
        for t in sorted({vs.DEFAULT_THREADS, kv_threads}):
            vs.hf_generate(model, prompts[:b], t)  # warm-up
            hf[t], hf_out = vs.hf_generate(model, prompts[:b], t)
        out[f"b{b}"] = dict(kvbench=kv_tps, kvbench_threads=kv_threads, hf=hf, ratio=kv_tps / max(hf.values()),
                            equal=sum(a == b_ for a, b_ in zip(kv_out, hf_out)))
    out["steps"] = step_costs(ckpt, files[max(BATCHES)])
    return out


def step_costs(ckpt: Path, prompts_file: Path) -> dict:
    """Median engine-step wall (ms) per algorithm at the largest batch, by the phase it ran."""
    try:  # a checkout from before the harness's layers (--base): harness/runner.py
        from harness.runner import run_config
    except ImportError:
        from harness.run.runner import run_config
    from mini_engine import engine as eng
    from mini_engine.model import backend as be

    phases: list[str] = []
    walls: list[tuple[float, str, float]] = []
    step, forward = eng.Engine.step, be.ModelBackend.forward
    flops = [0.0]
    undo = count_flops(flops)

    def timed_step(self):
        phases.clear()
        flops[0] = 0.0
        t0 = time.perf_counter()
        r = step(self)
        walls.append((time.perf_counter() - t0, ",".join(phases), flops[0]))
        return r

    def noted_forward(self, batch):
        phases.append(batch.phase.value)
        return forward(self, batch)

    eng.Engine.step, be.ModelBackend.forward = timed_step, noted_forward
    try:
        res = {}
        for name, algo in STEP_ALGOS.items():
            cfg = {"model": str(ckpt), "prompts": str(prompts_file), "page_size": 16, **algo}
            run_config(cfg)  # warm-up
            walls.clear()
            row = run_config(cfg)
            assert row["status"] == "ok", row.get("error")
            want = "decode" if name == "plain" else "verify"
            ms = [w * 1e3 for w, p, _ in walls if p == want]
            gflop = [f / 1e9 for _, p, f in walls if p == want]
            res[name] = dict(step_ms=statistics.median(ms), steps=len(ms), tau=row["metrics"]["tau"],
                             step_gflop=statistics.median(gflop))
        return res
    finally:
        eng.Engine.step, be.ModelBackend.forward = step, forward
        undo()


def count_flops(acc: list[float]):
    """Add each forward's matmul FLOPs (projections, MLP, LM head, the drafter's fc; 2 per
    multiply-add, attention's few left out) to acc[0], wherever the model code runs them.
    Returns the function that undoes the wrapping."""
    from mini_engine.model import draft, transformer

    def layer_flops(layer, rows: int) -> float:
        attn, mlp = layer.self_attn, layer.mlp
        return 2.0 * rows * sum(w.numel() for w in (attn.qkv_weight, attn.o_proj.weight, mlp.gate_up,
                                                    mlp.down_proj.weight))

    saved = []

    def wrap(owner, name, count):
        fn = getattr(owner, name)
        saved.append((owner, name, fn))

        def counted(*a, **k):
            acc[0] += count(*a, **k)
            return fn(*a, **k)
        setattr(owner, name, counted)

    fused = lambda kernels, layers, x, *a, **k: sum(layer_flops(layer, x.shape[0]) for layer in layers)  # noqa: E731
    for mod in (transformer, draft):
        wrap(mod, "fused_decode", fused)
        wrap(mod, "layer_step", lambda layer, x, *a, **k: layer_flops(layer, x.shape[0]))
    head = lambda self, h: 2.0 * h.shape[0] * self.head_weight().numel()  # noqa: E731
    wrap(transformer.Transformer, "logits", head)
    # greedy is one kernel call where the CPU kernels run, else it calls logits (counted there).
    kernel_head = lambda self, h: head(self, h) if transformer.ops() is not None else 0.0  # noqa: E731
    wrap(transformer.Transformer, "greedy", kernel_head)
    wrap(draft.DraftModel, "forward", lambda self, embeds, *a, **k: 2.0 * embeds.shape[0] * self.fc.weight.numel())

    def undo():
        for owner, name, fn in reversed(saved):
            setattr(owner, name, fn)
    return undo


# -- the parent ---------------------------------------------------------------------------

def env_for(checkout: Path, results: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(checkout), KVBENCH_RESULTS=results, PYTHONHASHSEED="0")
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


def run_child(checkout: Path, ckpt: Path, files: dict[int, Path], results: str) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(checkout), "--ckpt", str(ckpt),
           "--files", json.dumps({b: str(p) for b, p in files.items()})]
    p = subprocess.run(cmd, cwd=checkout, env=env_for(checkout, results), capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"child for {checkout} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


# The README's test command; -q and no cache directory change neither what runs nor its time.
PYTEST_CMD = ["-m", "pytest", "-n", "2", "-q", "-p", "no:cacheprovider"]


def timed(cmd: list[str], checkout: Path, results: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=checkout, env=env_for(checkout, results), stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0, p.returncode


def smoke_cmd() -> list[str]:
    return [sys.executable, "-c", "import sys; from harness.cli import main; sys.exit(main(sys.argv[1:]))",
            "sweep", "smoke", "--no-mlflow"]


def write_inputs(root: Path) -> tuple[Path, dict[int, Path]]:
    """The checkpoint and prompts of suites/bench/test_bench_vs_hf.py (its fixture's recipe)."""
    import numpy as np
    import torch
    import transformers

    sys.path.insert(0, str(HERE))
    from suites.bench import test_bench_vs_hf as vs

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=vs.VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=False)
    transformers.LlamaForCausalLM(cfg).to(torch.float32).save_pretrained(root / "ckpt")
    prompts = np.random.default_rng(0).integers(0, vs.VOCAB, (max(BATCHES), vs.PROMPT)).tolist()
    files = {}
    for b in BATCHES:
        files[b] = root / f"prompts-{b}.jsonl"
        files[b].write_text("".join(json.dumps({"prompt": p, "max_new_tokens": vs.NEW}) + "\n" for p in prompts[:b]))
    return root / "ckpt", files


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def report(name: str, rounds: list[dict]) -> dict:
    summary: dict = {}
    print(f"\n== {name}  ({len(rounds)} rounds; torch default threads {rounds[0]['default_threads']})")
    for b in BATCHES:
        rs = [r[f"b{b}"] for r in rounds]
        # HF is timed at torch's default threads and at kvbench's choice, which can differ
        # between rounds: a thread count's median is over the rounds that timed it.
        counts = sorted({t for r in rs for t in r["hf"]}, key=int)
        hf = {t: med([r["hf"][t] for r in rs if t in r["hf"]]) for t in counts}
        ratio = med([r["ratio"] for r in rs])
        summary[f"vs_hf_b{b}"] = ratio
        hf_txt = " ".join(f"hf@{t}thr={v:.0f}" for t, v in hf.items())
        print(f"  decode b{b:<3} kvbench={med([r['kvbench'] for r in rs]):.0f} tok/s "
              f"(threads {'/'.join(str(r['kvbench_threads']) for r in rs)})  {hf_txt}  ratio vs faster HF={ratio:.2f}  "
              f"equal outputs {rs[-1]['equal']}/{b}")
    plain = [r["steps"]["plain"]["step_ms"] for r in rounds]
    print(f"  plain decode step b{max(BATCHES)}: {med(plain):.2f} ms")
    for algo in ("eagle-chain", "dflash"):
        rel = [r["steps"][algo]["step_ms"] / r["steps"]["plain"]["step_ms"] for r in rounds]
        summary[f"{algo}_step_x"] = med(rel)
        line = (f"  {algo} verify step b{max(BATCHES)}: {med([r['steps'][algo]['step_ms'] for r in rounds]):.2f} ms"
                f" = {med(rel):.2f}x plain (tau {rounds[-1]['steps'][algo]['tau']:.2f})")
        if "step_gflop" in rounds[-1]["steps"][algo]:  # a --base checkout from before the FLOP count has none
            flop_x = [r["steps"][algo]["step_gflop"] / r["steps"]["plain"]["step_gflop"] for r in rounds]
            per_flop = [x / f for x, f in zip(rel, flop_x)]
            summary[f"{algo}_ms_per_flop_x"] = med(per_flop)
            line += (f"; its matmul FLOPs {med(flop_x):.2f}x plain's, so {med(per_flop):.2f}x plain's time"
                     " per FLOP")
        print(line)
    for key in ("smoke_s", "pytest_s"):
        xs = [r[key] for r in rounds if key in r]
        if xs:
            summary[key] = med(xs)
            fails = [r[key + "_rc"] for r in rounds if r.get(key + "_rc")]
            print(f"  {key[:-2]} wall: {med(xs):.1f} s" + (f"  (non-zero exit codes: {fails})" if fails else ""))
    return summary


def walls(checkouts: dict[str, Path], rounds: int, smoke: bool, pytest: bool) -> int:
    """--walls: the test command's and the smoke sweep's wall per checkout, interleaved."""
    names = {"pytest_s": "test command (python -m pytest -n 2)", "smoke_s": "kvbench sweep smoke --no-mlflow"}
    walls_of: dict[str, dict[str, list[float]]] = {c: {k: [] for k in names} for c in checkouts}
    failed = False
    with tempfile.TemporaryDirectory(prefix="kvbench-walls-") as tmp:
        for i in range(rounds):
            for name, path in list(checkouts.items())[:: 1 if i % 2 == 0 else -1]:
                cmds = ({"pytest_s": [sys.executable, *PYTEST_CMD]} if pytest else {}) | (
                    {"smoke_s": smoke_cmd()} if smoke else {})
                for key, cmd in cmds.items():
                    wall, rc = timed(cmd, path, tempfile.mkdtemp(dir=tmp))
                    walls_of[name][key].append(wall)
                    failed |= rc != 0
                    print(f"round {i + 1}/{rounds} {name}: {names[key]}: {wall:.1f} s"
                          + (f" (exit {rc})" if rc else ""), flush=True)
    print()
    for name, path in checkouts.items():
        for key, xs in walls_of[name].items():
            if xs:
                print(f"{name} ({path}): {names[key]}: median {med(xs):.1f} s over {len(xs)} run(s)")
    return 1 if failed else 0


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"measure_speed: error: {message}\n")  # one line, no usage block


# Each round is minutes (a smoke sweep, HF generate at three batches): a billion rounds
# ran until killed.
MAX_ROUNDS = 20


def check_flags(ap: Parser, a: argparse.Namespace) -> None:
    """Bounds and contradictions, before any work: one line, exit 2."""
    if a.rounds is not None and not 1 <= a.rounds <= MAX_ROUNDS:
        ap.error(f"--rounds takes a whole number from 1 to {MAX_ROUNDS}, not {a.rounds}")
    if a.pytest and a.no_pytest:
        ap.error("--pytest and --no-pytest contradict each other; give one of them")
    if a.no_pytest and not a.walls:
        ap.error("--no-pytest applies to --walls only (without --walls the test command is timed only with --pytest)")


def main() -> int:
    ap = Parser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", type=Path, help="a second checkout to compare against, interleaved")
    ap.add_argument("--rounds", type=int, help="rounds per checkout (default 3; 1 with --walls)")
    ap.add_argument("--pytest", action="store_true", help="also time `python -m pytest -n 2` (long)")
    ap.add_argument("--walls", action="store_true",
                    help="only time `python -m pytest -n 2` and `kvbench sweep smoke --no-mlflow`")
    ap.add_argument("--no-smoke", action="store_true", help="skip `kvbench sweep smoke`")
    ap.add_argument("--no-pytest", action="store_true", help="with --walls: skip `python -m pytest -n 2`")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--ckpt", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--files", help=argparse.SUPPRESS)
    a = ap.parse_args()
    check_flags(ap, a)
    if a.base is not None and not (a.base / "harness").is_dir():
        ap.error(f"--base {str(a.base)!r} is not a kvbench checkout (no harness/ in it)")
    rounds = a.rounds or (1 if a.walls else 3)
    if a.walls:
        checkouts = {"base": a.base.resolve(), "head": HERE} if a.base else {"head": HERE}
        if a.no_smoke and a.no_pytest:
            ap.error("--walls with both --no-smoke and --no-pytest leaves nothing to time")
        return walls(checkouts, rounds, not a.no_smoke, not a.no_pytest)
    if a.child:
        sys.path.insert(0, str(a.child))
        files = {int(b): Path(p) for b, p in json.loads(a.files).items()}
        print(json.dumps(child(a.ckpt, files)))
        return 0
    checkouts = {"head": HERE}
    if a.base:
        checkouts = {"base": a.base.resolve(), "head": HERE}
    with tempfile.TemporaryDirectory(prefix="kvbench-speed-") as tmp:
        ckpt, files = write_inputs(Path(tmp))
        per: dict[str, list[dict]] = {k: [] for k in checkouts}  # each checkout's rounds
        for i in range(rounds):
            # Alternate which checkout goes first: neither always gets the warmer machine.
            order = list(checkouts.items())[:: 1 if i % 2 == 0 else -1]
            for name, path in order:
                results = tempfile.mkdtemp(dir=tmp)
                r = run_child(path, ckpt, files, results)
                if not a.no_smoke:
                    r["smoke_s"], r["smoke_s_rc"] = timed(smoke_cmd(), path, results)
                if a.pytest and i == 0:  # one pass each: minutes per run
                    r["pytest_s"], r["pytest_s_rc"] = timed([sys.executable, *PYTEST_CMD], path, results)
                per[name].append(r)
                print(f"round {i + 1}/{rounds} {name} done", file=sys.stderr, flush=True)
        summaries = {name: report(f"{name}: {path}", per[name]) for name, path in checkouts.items()}
    if a.base:
        print("\n== head / base (same rounds)")
        for key, v in summaries["head"].items():
            b = summaries["base"].get(key)
            if b:
                print(f"  {key}: base {b:.2f} -> head {v:.2f}  ({v / b:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
