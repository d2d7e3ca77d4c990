"""Links the bot and triage put in comments: MLflow runs of a sweep's run directory."""

from __future__ import annotations

import re
from pathlib import Path

from harness.core.errors import HarnessError
from harness.store.artifact import read_meta

RUN_UUID_RE = re.compile(r"[0-9a-f]{32}\Z")
EXPERIMENT_ID_RE = re.compile(r"[0-9]{1,19}\Z")


def mlflow_link(run_dir: Path, ui_url: str) -> str:
    """The MLflow UI page of the sweep's parent run (its config runs nest under it), or ''."""
    if not ui_url or not Path(run_dir).is_dir():
        return ""
    try:  # the run dir is the pull request's artifact: an odd meta.json means no link
        meta = read_meta(Path(run_dir))
    except HarnessError:
        return ""
    parent, exp = str(meta.get("mlflow_parent") or ""), str(meta.get("mlflow_experiment") or "")
    if not RUN_UUID_RE.match(parent):
        return ""
    # MLflow 3.17 picks its GenAI or model-training pages from workflowType, else the
    # browser's last choice (GenAI at first); /#/runs/<id> redirects into the run's
    # experiment and drops the query, so the link names the experiment when it is known.
    if EXPERIMENT_ID_RE.match(exp):
        return f"{ui_url.rstrip('/')}/#/experiments/{exp}/runs/{parent}?workflowType=machine_learning"
    return f"{ui_url.rstrip('/')}/#/runs/{parent}"
