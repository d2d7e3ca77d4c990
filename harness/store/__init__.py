"""The run directory, the single source of truth: results.jsonl (one writer, the grid's
controller), meta.json, locks, and a run directory read back from a CI artifact.

Layer order and rule: ARCHITECTURE.md, "Harness layers"."""
