"""Verdicts over rows: a suite's expectations, repeats merged, baselines, compare,
history across runs, bisect.

Layer order and rule: ARCHITECTURE.md, "Harness layers"."""
