"""The first screen of a kvbench experiment in MLflow: its headline columns and charts.

MLflow 3.17 opens the runs table on Source / Models / Dataset columns (all "-" for a
sweep) and its chart view on every metric in alphabetical sections, so a night opened
on `engine/aborted_requests` and `invariants/violations` (the expected ones), with
titles cut to `memory/peak_tokens_h...`. Which columns and charts show is browser
state; the one place a server holds it is a shared view, the experiment tag
``mlflow.sharedViewState.<key>`` that MLflow's "Share" button writes and the
``viewStateShareKey=<key>`` of the experiment's URL loads. kvbench writes one such
view per experiment: the headline figures (peak token slots held, stranded and
leaked slots, the verdicts) as the columns, and as a first chart section with short
titles, for config runs and for the sweep's aggregates on parent runs. Every link
kvbench prints to an experiment carries its key, and every link to a run carries
``workflowType=machine_learning`` (MLflow 3.17 picks its GenAI or model-training
pages from that parameter, or the browser's last choice, not from an experiment tag).

The metric names are the schema's (harness/core/metrics.py): a config run's headline
figures are ``at a glance/<name>``, the parent's aggregates ``<group>/<name>.<fold>/all``.
"""

from __future__ import annotations

import hashlib
import json

from harness.core.metrics import lookup

SHARE_TAG = "mlflow.sharedViewState."
ML_VIEW = "workflowType=machine_learning"
SECTION = "kvbench-headline"
# (metric, title): a config run's figure, then the sweep's aggregate a parent carries
# (harness/view/mlflow_layout.py); a chart with no value in the runs shown stays hidden.
# MLflow 3.17's chart grid titles a card by its metric name; the title is kept for the
# card's editor and for versions that show it.
HELD, STRANDED, LEAKED = (lookup(n).mlflow_name for n in ("peak_tokens_held", "peak_stranded_slots", "leaked_tokens"))
HEADLINE = (
    (HELD, "peak token slots held"),
    (STRANDED, "peak stranded slots"),
    (LEAKED, "leaked token slots"),
    ("memory/peak_tokens_held.max/all", "sweep: peak slots held"),
    ("memory/peak_stranded_slots.max/all", "sweep: peak stranded"),
    ("memory/leaked_tokens.sum/all", "sweep: leaked slots"),
    ("sweep/verdict_unexpected", "sweep: unexpected"),
    ("sweep/verdict_failed", "sweep: failed configs"),
    ("sweep/violations_unexpected", "sweep: unexpected violations"),
)
COLUMNS = ("tags.`kvbench.compare`", "tags.`kvbench.verdict`", f"metrics.`{HELD}`", f"metrics.`{STRANDED}`",
           f"metrics.`{LEAKED}`",
           "metrics.`memory/peak_tokens_held.max/all`", "metrics.`memory/leaked_tokens.sum/all`",
           "metrics.`sweep/verdict_unexpected`", "tags.`commit`")


def headline_view() -> dict:
    """The shared view's state, in the shape MLflow's Share button stores it."""
    charts = [{"uuid": f"kvbench-{i}", "type": "BAR", "runsCountToCompare": 10, "metricSectionId": SECTION,
               "deleted": False, "isGenerated": False, "metricKey": key, "displayName": title}
              for i, (key, title) in enumerate(HEADLINE)]
    return {
        "orderByKey": "attributes.start_time", "orderByAsc": False,
        "selectedColumns": list(COLUMNS),
        "compareRunCharts": charts,
        # One card a row: MLflow titles a card by its full metric name and cuts it; at two a
        # row beside the Assistant panel MLflow opens with, 1440 px wide, it read `at a glance/peak_t...`.
        "compareRunSections": [{"uuid": SECTION, "name": "headline (kvbench)", "display": True, "columns": 1,
                                "isReordered": True, "deleted": False, "isGenerated": False}],
        "isAccordionReordered": True, "hideEmptyCharts": True, "useGroupedValuesInCharts": True,
    }


def view_value() -> str:
    return json.dumps(headline_view(), sort_keys=True, separators=(",", ":"))


def view_key() -> str:
    """Names the view by its content: a changed view is a new key, never a stale one."""
    return "kvbench-" + hashlib.sha256(view_value().encode()).hexdigest()[:16]


def view_tags() -> dict[str, str]:
    """The experiment tag that holds the view."""
    return {SHARE_TAG + view_key(): view_value()}


def install_view(cl, exp) -> None:
    """Put the current headline view on an experiment (an MLflow Experiment), and take
    off kvbench's earlier ones: a link with an old key then opens MLflow's own view."""
    for key, value in view_tags().items():
        if exp.tags.get(key) != value:
            cl.set_experiment_tag(exp.experiment_id, key, value)
    for key in exp.tags:
        if key.startswith(SHARE_TAG + "kvbench-") and key not in view_tags():
            cl.delete_experiment_tag(exp.experiment_id, key)


def runs_query() -> str:
    """The query of an experiment link: the model-training pages, on the headline view."""
    return f"{ML_VIEW}&viewStateShareKey={view_key()}"
