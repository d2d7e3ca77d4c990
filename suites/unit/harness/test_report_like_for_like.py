"""The report compares like for like: a heatmap cell is one config, captioned with the
options held fixed; a timing measured once a run is never a step."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.judge import history
from harness.view.report_configs import configs_section, found_steps
from harness.view.report_heatmap import heatmap_section, slices

BASE = {"spec": "dflash", "block_size": 16, "profile": "sglang-0.5.23", "window": None, "seed": 7,
        "shared_prefix": 0, "turns": 1, "topk": None}


def row(held: int, **config) -> dict:
    cfg = {**BASE, **config}
    return {"key": repr(sorted(cfg.items())), "config": cfg, "status": "ok", "verdict": "ok",
            "metrics": {"peak_tokens_held": held}}


# DFLASH at ps 1 / 16 / 64 (the like-for-like column), plus a shared-prompt workload that
# exists only at ps 64 and holds far more: the night the review found.
NIGHT = [row(1830, page_size=1), row(1888, page_size=16), row(2240, page_size=64),
         row(4928, page_size=64, shared_prefix=96, turns=2),
         row(1900, page_size=16, window=64), row(2300, page_size=64, window=64)]


def test_a_heatmap_cell_is_one_config_not_the_max_over_other_workloads():
    found = slices(NIGHT, "peak_tokens_held", "page_size", "block_size")
    first, cells = found[0]
    assert first == {"shared_prefix": "0", "turns": "1", "window": "none"}
    assert cells == {(1, 16): 1830, (16, 16): 1888, (64, 16): 2240}  # ps 64 is 2240, not 4928
    shared = next(c for named, c in found if named["shared_prefix"] == "96")
    assert shared == {(64, 16): 4928}  # its own slice, its own heatmap
    assert sum(len(c) for _, c in found) == len(NIGHT)  # every config once, none folded


def test_heatmap_captions_name_the_fixed_values_and_never_python_none(tmp_path: Path):
    html = heatmap_section(history.Night(tmp_path, {}, NIGHT), "peak_tokens_held")
    assert "None" not in html and "max of" not in html
    assert "<figcaption>shared_prefix=0, turns=1, window=none</figcaption>" in html
    assert html.count('<svg class="heatmap"') == 3
    first = html[html.index('id="heatmap-0"'):html.index("</svg>", html.index('id="heatmap-0"'))]
    assert ">2240</text>" in first and "4928" not in first


def nights(tmp_path: Path, values: list[float], samples: list[list[float]] | None = None) -> history.History:
    out = []
    for i, v in enumerate(values):
        r = row(1888, page_size=16)
        r["metrics"]["output_tokens_per_s"] = v
        if samples:
            r["samples"] = {"output_tokens_per_s": samples[i]}
        out.append(history.Night(tmp_path / f"n{i}", {"git_commit": f"{i}" * 40, "created": i}, [r]))
    return history.build(out)


def test_a_single_sample_timing_is_drawn_as_one_sample_never_as_a_step(tmp_path: Path):
    hist = nights(tmp_path, [10000, 10100, 81000, 9000, 80000, 9100])  # +713 %, -89 %: noise of one sample
    key = hist.keys()[0]
    assert found_steps(hist, key, ["output_tokens_per_s"]) == []
    html, total = configs_section(hist, ["output_tokens_per_s"])
    assert total == 0 and '<td class="steps">' not in html
    assert "output_tokens_per_s (one sample a run: no spread, not judged)" in html


def test_a_repeated_timing_still_steps(tmp_path: Path):
    levels = [100.0] * 4 + [200.0] * 4
    hist = nights(tmp_path, levels, [[v - 1, v, v + 1] for v in levels])
    assert len(found_steps(hist, hist.keys()[0], ["output_tokens_per_s"])) == 1


@pytest.mark.slow
def test_in_a_browser_the_ps64_cell_reads_the_like_for_like_figure_with_its_unit(tmp_path: Path):
    chromium = Path("/usr/bin/chromium")
    if not chromium.exists():
        pytest.skip("no browser: /usr/bin/chromium is absent (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    page = tmp_path / "heat.html"
    page.write_text("<!DOCTYPE html><html><body>" + heatmap_section(history.Night(tmp_path, {}, NIGHT),
                                                                      "peak_tokens_held") + "</body></html>")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(chromium), args=["--no-sandbox"])
        try:
            tab = browser.new_page(viewport={"width": 1200, "height": 900})
            tab.goto(page.resolve().as_uri())
            assert tab.get_by_text("peak_tokens_held in tokens of one config").is_visible()
            first = tab.locator("figure.slice").first
            assert first.locator("figcaption").inner_text() == "shared_prefix=0, turns=1, window=none"
            cells = first.locator("svg.heatmap text").all_text_contents()
            assert "2240" in cells and "4928" not in cells and first.is_visible()
            tab.screenshot(path=str(tmp_path / "heat.png"))
        finally:
            browser.close()
