"""Links the bot and triage put in comments: MLflow runs of a sweep's run directory."""

from __future__ import annotations

import re
from pathlib import Path

from harness.results import RunDir

RUN_UUID_RE = re.compile(r"[0-9a-f]{32}\Z")


def mlflow_link(run_dir: Path, ui_url: str) -> str:
    """The MLflow UI page of the sweep's parent run (its config runs nest under it), or ''."""
    if not ui_url or not Path(run_dir).is_dir():
        return ""
    parent = str(RunDir(Path(run_dir)).meta().get("mlflow_parent") or "")
    # MLflow routes /#/runs/<id> to the run's page in whatever experiment holds it.
    return f"{ui_url.rstrip('/')}/#/runs/{parent}" if RUN_UUID_RE.match(parent) else ""
