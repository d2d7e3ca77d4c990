"""The harness's vocabulary and small helpers: the option and metric schemas, the workload,
the errors, number and text formatting, safe file writes. Imports mini_engine and the
standard library only; every other layer imports it.

Layer order and rule: ARCHITECTURE.md, "Harness layers"."""
