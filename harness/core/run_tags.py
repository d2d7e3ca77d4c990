"""Who made a run: the CI context every MLflow parent and config run of a sweep carries.

Declared here, beside the metric schema (metrics.py), so that the tag names, what each
means and where its value comes from live in one place. The values are read once,
when a sweep is set up, from the environment the workflows set (ci/workflows) and
kept in the run's meta.json: a later `kvbench sync`, from another shell or machine,
tags what it uploads as the sweep was made, not as the syncing shell looks.

Four runners share one server and one experiment per suite; `1-gpu-h200` and
`8-gpu-h200` share a profile and a GPU name, so without these only the run name
tells them apart. Pull-request reruns go to an experiment of their own
(``experiment_suffix``), so they never draw on the nightly charts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from harness.core.errors import UsageError


@dataclass(frozen=True)
class RunTag:
    name: str
    source: str  # where its value comes from
    help: str


RUN_TAGS = (
    RunTag("runner", "$RUNNER_LABEL", "the CI runner label (ci/runners.toml), 'local' outside CI"),
    RunTag("gpu_count", "the visible GPUs", "GPUs the sweep could use (CUDA_VISIBLE_DEVICES applied); "
                                             "the GPU kind is the gpu_name and hardware_profile tags"),
    RunTag("trigger", "$KVBENCH_PR, $GITHUB_EVENT_NAME", "what started it: schedule, dispatch, pr-rerun, "
                                                          "another GitHub event's name, or local"),
    RunTag("ci_run_url", "$GITHUB_SERVER_URL/$GITHUB_REPOSITORY/actions/runs/$GITHUB_RUN_ID",
           "the CI run that made it, 'none' outside CI"),
    RunTag("pr", "$KVBENCH_PR", "the pull request a rerun measured, 'none' otherwise"),
)
NAMES = tuple(t.name for t in RUN_TAGS)

PR_TRIGGER = "pr-rerun"
_EVENTS = {"schedule": "schedule", "workflow_dispatch": "dispatch"}
_SAFE = re.compile(r"[A-Za-z0-9._-]{1,100}\Z")


def trigger(env: Mapping[str, str]) -> str:
    """schedule, dispatch, pr-rerun (the bot's rerun workflow sets KVBENCH_PR), another
    event's name as GitHub spells it, or local."""
    if env.get("KVBENCH_PR", "").strip():
        return PR_TRIGGER
    event = env.get("GITHUB_EVENT_NAME", "").strip()
    return _EVENTS.get(event, event if _SAFE.match(event) else "local")


def ci_run_url(env: Mapping[str, str]) -> str:
    repo, run = env.get("GITHUB_REPOSITORY", "").strip(), env.get("GITHUB_RUN_ID", "").strip()
    if not (repo and run.isdigit()):
        return "none"
    server = env.get("GITHUB_SERVER_URL", "").strip().rstrip("/") or "https://github.com"
    return f"{server}/{repo}/actions/runs/{run}"


def ci_context(env: Mapping[str, str]) -> dict[str, str]:
    """The environment's part of the tags (gpu_count comes from the hardware), checked
    once: a malformed value is one line naming the variable, before anything runs."""
    pr = env.get("KVBENCH_PR", "").strip()
    if pr and not (pr.isdigit() and int(pr) > 0):
        raise UsageError(f"KVBENCH_PR must be a pull request number (got {pr[:40]!r}); unset it outside a rerun")
    runner = env.get("RUNNER_LABEL", "").strip()
    if runner and not _SAFE.match(runner):
        raise UsageError(f"RUNNER_LABEL must be a runner label of ci/runners.toml: letters, digits, '.', '_' "
                         f"or '-' (got {runner[:40]!r})")
    return {"runner": runner or "local", "trigger": trigger(env), "ci_run_url": ci_run_url(env), "pr": pr or "none"}


def run_tags(meta: Mapping) -> dict[str, str]:
    """Every declared tag's value for a sweep's meta.json (a run set up before these
    were recorded reads as local)."""
    ci = meta.get("ci") or {}
    hw = meta.get("hardware") or {}
    values = {"runner": "local", "trigger": "local", "ci_run_url": "none", "pr": "none", **ci,
              "gpu_count": str(hw.get("gpu_count") or 0)}
    return {name: str(values[name]) for name in NAMES}


def experiment_suffix(meta: Mapping) -> str:
    """'-pr' for a pull request's rerun: its own experiment, apart from the nights."""
    return "-pr" if (meta.get("ci") or {}).get("trigger") == PR_TRIGGER else ""
