#!/usr/bin/env bash
# The GPU check: run kvbench's GPU-side code once on one CUDA machine and keep every
# figure and failure under $OUT (default ./gpu-check-out): pytest -m gpu (junit xml),
# a slice of the nightly-gpu sweep, K11 with the Triton kernels on the device, decode
# throughput of the qwen3-0.6b shape against the HBM roofline, the paged-decode
# kernel against SDPA, and summary.json. Needs torch, triton and pytest; no network,
# no install. About 5 minutes on one H200.
#
#   ci/gpu-check.sh                 # on a CUDA machine (CUDA_VISIBLE_DEVICES picks the GPU)
#   ci/gpu-check.sh --dry-run       # anywhere: tiny shapes on the CPU, checks the plumbing
#   ci/gpu-check.sh --only decode,kernel --peak-gbs 3350
#
# Exit status: 0 every step passed, 1 a step failed (see summary.json), 2 bad input.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export OUT="${OUT:-$PWD/gpu-check-out}"
exec "${PYTHON:-python3}" -m harness.gpu.check --out "$OUT" "$@"
