"""Figures that mean what they say: one config per point, spreads from warm repeats,
bookkeeping speed named as such, memory against the axes that set it, no RSS."""

from __future__ import annotations

import pytest

from harness.view.facets import POLICIES, SHAPE, facet, label, panel_title, spread
from harness.view.plots import metric_label, write_plots


def row(ps, window=None, policy="aligned", spec="dflash", model="none", tps=1000.0, samples=None, **metrics):
    config = {"spec": spec, "page_size": ps, "policy": policy, "window": window, "model": model,
              "block_size": 16 if spec == "dflash" else None, "topk": 1 if spec == "eagle" else None,
              "layer_pattern": "1:1" if window else "all-global"}
    m = {"output_tokens_per_s": tps, "plan_us_per_decode_step": 5.0, "peak_pages_held": 4 * ps,
         "peak_reserved_slots": 32, "peak_stranded_slots": 0 if policy == "aligned" else ps - 1,
         "leaked_pages": 0, "rss_peak_bytes": 3e8, **metrics}
    r = {"key": repr(sorted(config.items())), "config": config, "metrics": m, "status": "ok", "verdict": "ok",
         "series": {}, "violations": {}}
    if samples:
        r["samples"] = {"output_tokens_per_s": samples}
    return r


def test_an_option_that_changes_the_figure_is_a_panel_never_a_median():
    # SWA halves throughput: a median over window drew a figure no config measured.
    rows = [row(ps, window=w, policy=p, tps=(1000.0 if w is None else 500.0) * ps)
            for ps in (1, 16) for w in (None, 64) for p in ("aligned", "unaligned")]
    f = facet(rows, ("page_size",), SHAPE + POLICIES)
    assert f.line_keys == ("policy",) and f.dropped == 0
    assert sorted(dict(p.values)["window"] or 0 for p in f.panels) == [0, 64]
    for panel in f.panels:
        assert sum(len(line) for line in panel.lines.values()) == 4  # every config is its own point
        for by_x in panel.lines.values():
            for (ps,), r in by_x.items():
                assert r["config"]["page_size"] == ps and r["config"]["window"] == dict(panel.values)["window"]


def test_a_point_is_the_median_of_the_warm_repeats_with_its_quartiles():
    assert spread(row(16, samples=[10.0, 20.0, 30.0, 40.0]), "output_tokens_per_s") == (25.0, 17.5, 32.5, 4)
    assert spread(row(16, tps=7.0), "output_tokens_per_s") == (7.0, 7.0, 7.0, 1)


def test_legends_name_only_what_varies_on_a_line():
    f = facet([row(16, spec="eagle"), row(64, spec="eagle"), row(16), row(64)], ("page_size",), SHAPE + POLICIES)
    assert sorted(label(k, f.line_keys) for k in f.panels[0].lines) == ["dflash bs16", "eagle topk1"]


def test_bookkeeping_speed_is_labelled_as_such():
    assert "bookkeeping speed" in metric_label("output_tokens_per_s", [row(16)])
    assert "bookkeeping" not in metric_label("output_tokens_per_s", [row(16, model="tiny")])
    assert "bookkeeping" not in metric_label("peak_pages_held", [row(16)])


def test_the_sweep_figures_are_written_and_rss_is_not_one_of_them(tmp_path):
    rows = [row(ps, window=w, policy=p, spec=s, samples=[900.0, 1000.0, 1100.0])
            for ps in (1, 16, 64) for w in (None, 64) for p in ("aligned", "unaligned") for s in ("dflash", "eagle")]
    rows += [{**rows[0], "key": "broken", "status": "failed", "metrics": {}}]
    names = {p.name for p in write_plots(rows, tmp_path)}
    assert {"memory_vs_page_size.png", "memory_vs_window.png", "timings_vs_page_size.png",
            "peak_stranded_slots_heatmap.png", "leaked_tokens_heatmap.png"} <= names
    assert "memory_vs_block_size.png" not in names  # one block size is a point, not a figure
    assert not any("rss" in n for n in names)
    assert all((tmp_path / n).stat().st_size > 5000 for n in names)


@pytest.mark.parametrize("n_panels", [3, 20])
def test_panels_past_the_limit_are_counted_not_drawn(n_panels):
    rows = [row(ps, seed=i) for ps in (1, 16) for i in range(n_panels)]
    for r in rows:
        r["config"]["seed"] = r["metrics"].pop("seed")
    f = facet(rows, ("page_size",), SHAPE + POLICIES)
    assert len(f.panels) == min(n_panels, 12) and f.dropped == max(0, n_panels - 12)


def test_block_size_gets_its_figure_when_it_varies(tmp_path):
    rows = []
    for bs in (4, 16):
        for ps in (1, 16):
            r = row(ps, policy="unaligned")
            r["config"]["block_size"] = bs
            r["key"] += str(bs)
            rows.append(r)
    rows.append(row(16, spec="eagle"))  # no block size: not on that figure
    names = {p.name for p in write_plots(rows, tmp_path)}
    assert "memory_vs_block_size.png" in names


def test_a_workload_run_at_one_page_size_is_counted_not_drawn_as_a_panel():
    # The smoke figure drew 5 panels a metric, two of them single points (a shared-prefix
    # workload at ps 64 only, the real-model config): 20 panels too small to read in MLflow.
    rows = [row(ps, window=w) for ps in (1, 16) for w in (None, 64)]
    lone = row(64, model="tiny")
    f = facet(rows + [lone], ("page_size",), SHAPE + POLICIES)
    assert len(f.panels) == 2 and f.single == 1
    assert all(lone not in p.rows for p in f.panels)
    # Each title names only what sets its panel apart; what every panel shares is said once.
    assert dict(f.common)["model"] == "none"
    assert sorted(panel_title(p, f.common) for p in f.panels) == [
        "layer_pattern=1:1, window=64", "layer_pattern=all-global, window=none"]
