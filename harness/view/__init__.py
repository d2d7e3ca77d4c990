"""Read-only views of a store: MLflow (layout and upload), the summary table, the plots, the
HTML report. Each can be rebuilt from results.jsonl (kvbench sync, kvbench report).

Layer order and rule: ARCHITECTURE.md, "Harness layers"."""
