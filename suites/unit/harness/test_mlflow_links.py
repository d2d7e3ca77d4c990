"""Links into MLflow open its model-training pages, on kvbench's headline view."""

from __future__ import annotations

import json
from pathlib import Path

from harness.store.links import mlflow_link
from harness.view.mlflow_views import COLUMNS, HEADLINE, SHARE_TAG, headline_view, runs_query, view_key, view_tags

PARENT = "ab" * 16


def run_dir(tmp_path: Path, **meta) -> Path:
    tmp_path.joinpath("meta.json").write_text(json.dumps({"mlflow_parent": PARENT, **meta}))
    return tmp_path


def test_a_run_link_names_its_experiment_so_the_model_training_view_survives(tmp_path):
    """/#/runs/<id> redirects into the experiment and drops ?workflowType, which opened the
    run on MLflow 3.17's GenAI pages: the link goes to the experiment's route itself."""
    link = mlflow_link(run_dir(tmp_path, mlflow_experiment="4"), "https://ml.example/")
    assert link == f"https://ml.example/#/experiments/4/runs/{PARENT}?workflowType=machine_learning"


def test_without_an_experiment_id_the_link_is_the_plain_run_route(tmp_path):
    assert mlflow_link(run_dir(tmp_path), "https://ml.example") == f"https://ml.example/#/runs/{PARENT}"
    # an odd experiment id from an artifact's meta.json is not put into a URL
    odd = mlflow_link(run_dir(tmp_path, mlflow_experiment="4/../x"), "https://ml.example")
    assert odd == f"https://ml.example/#/runs/{PARENT}"


def test_the_headline_view_is_one_experiment_tag_its_links_name():
    [(tag, value)] = view_tags().items()
    assert tag == SHARE_TAG + view_key() and json.loads(value) == headline_view()
    assert runs_query() == f"workflowType=machine_learning&viewStateShareKey={view_key()}"
    view = headline_view()
    assert view["selectedColumns"] == list(COLUMNS)
    first = [c["metricKey"] for c in view["compareRunCharts"]]
    assert first[:3] == ["at a glance/peak_tokens_held", "at a glance/peak_stranded_slots", "at a glance/leaked_tokens"]
    assert all(c["metricSectionId"] == view["compareRunSections"][0]["uuid"] for c in view["compareRunCharts"])
    assert len(value) < 5000 and len(HEADLINE) == len(first)  # an MLflow tag value holds it
