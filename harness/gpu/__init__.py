"""The GPU check behind ci/gpu-check.sh and its throughput figures.

Layer order and rule: ARCHITECTURE.md, "Harness layers"."""
