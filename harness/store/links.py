"""Links the bot and triage put in comments: MLflow runs of a sweep's run directory."""

from __future__ import annotations

import re
from pathlib import Path

from harness.core.errors import HarnessError
from harness.store.artifact import read_meta

RUN_UUID_RE = re.compile(r"[0-9a-f]{32}\Z")


def mlflow_link(run_dir: Path, ui_url: str) -> str:
    """The MLflow UI page of the sweep's parent run (its config runs nest under it), or ''."""
    if not ui_url or not Path(run_dir).is_dir():
        return ""
    try:  # the run dir is the pull request's artifact: an odd meta.json means no link
        parent = str(read_meta(Path(run_dir)).get("mlflow_parent") or "")
    except HarnessError:
        return ""
    # MLflow routes /#/runs/<id> to the run's page in whatever experiment holds it.
    return f"{ui_url.rstrip('/')}/#/runs/{parent}" if RUN_UUID_RE.match(parent) else ""
