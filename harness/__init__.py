"""harness: sweeps, metrics, MLflow logging, baselines and CI glue around mini_engine."""
