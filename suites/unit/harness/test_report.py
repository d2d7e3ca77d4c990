"""kvbench report: one self-contained HTML page and a Markdown summary over recorded nights."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from recorded_nights import C1, C2, C3, REGRESSED, SLOWER, record


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rep")
    return record(tmp, tmp / "nights")


@pytest.fixture(scope="module")
def page(nights, tmp_path_factory):
    from harness.cli import main

    out = tmp_path_factory.mktemp("out")
    html, md = out / "report.html", out / "summary.md"
    md.write_text("earlier step\n")
    argv = ["report", *(str(n.path) for n in nights), "--out", str(html), "--summary", str(md),
            "--mlflow-url", "https://mlflow.example"]
    assert main(argv) == 0
    return html, md


def test_page_is_self_contained(page):
    text = page[0].read_text()
    assert text.startswith("<!DOCTYPE html>")
    # Nothing to fetch: no scripts, stylesheets, images or fonts from anywhere.
    assert not re.search(r"<script|<link|<img|@import|url\(", text)
    # Links leave the page only for MLflow; the rest are the per-config views' anchors.
    # (in the run's experiment: /#/runs/<id> redirects there and drops the model-training view)
    assert set(re.findall(r'href="([^"#][^"]*)"', text)) == {f"https://mlflow.example/#/experiments/3/runs/{i}"
                                                         + f"{i}" * 31 + "?workflowType=machine_learning"
                                                         for i in (1, 2, 3)}


def test_page_holds_trends_moves_compare_and_heatmaps(page):
    text = page[0].read_text()
    assert text.count('<svg class="trend"') == 5  # the default trend metrics
    assert text.count('<svg class="moved"') == 2  # each moved figure on its own scale
    assert text.count('<svg class="heatmap"') == 2  # aligned and unaligned dflash facets
    trend = text[text.index('id="trend-0"'):text.index("</svg>", text.index('id="trend-0"'))]
    assert trend.count("<polyline") >= 2 and REGRESSED in text
    # The newest night against the one before is the moved table's last pair: the timing
    # regression at C3 is listed once, in the moved table, in red; the compare says so.
    table = text[text.index('<table class="compare">'):]
    table = table[:table.index("</table>")]
    assert "wall_s" not in table and "the moved figures are in the table above" in table
    moves = text[text.index('<table class="moves">'):]
    moves = moves[:moves.index("</table>")]
    assert f"<td class=\"mono\">{SLOWER}</td><td class=\"mono\">wall_s</td>" in moves
    assert f"{'1' * 10}..{C2[:10]}" in moves and f"{C2[:10]}..{C3[:10]}" in moves
    assert '<tr class="regression">' in moves and "tr.regression td{background:#fde8e4}" in text
    # one line per metric and direction above the table
    assert '<li class="regression">wall_s regressed' in text and '<li class="regression">peak_pages_held' in text
    # A rate of the accounting-only backend is labelled as bookkeeping speed.
    assert "[bookkeeping]" in text and "not a serving figure" in text


def test_timing_error_bars_come_from_the_samples(nights, cli, tmp_path):
    assert cli("report", *(n.path for n in nights), "--metric", "wall_s", "--out", tmp_path / "r.html") == 0
    text = (tmp_path / "r.html").read_text()
    assert text.count('<svg class="trend"') == 1
    # 8 configs, 3 nights each, every point with 5 samples: one bar per point of a line.
    # Seven configs have the same samples every night: one line for them (named with
    # the count), or six of them would hide under the seventh; SLOWER has its own.
    trend = text[text.index('id="trend-0"'):text.index("</svg>", text.index('id="trend-0"'))]
    assert trend.count('class="err"') == 2 * 3 and trend.count("<polyline") == 2
    assert "and 6 more with the same values" in text
    shared = re.search(r'<li title="([^"]*)"><span class="swatch"[^>]*></span>[^<]*and 6 more', text)
    assert shared and len(shared.group(1).split("\n")) == 7 and SLOWER not in shared.group(1)  # named on hover
    # and 3 more on the moved wall_s figure's own chart; the per-config views draw them again
    above = text[:text.index('<h2 id="configs">')] + text[text.index('<h2 id="moved">'):]
    assert above.count('class="err"') == 2 * 3 + 3
    assert "wall_s (timing, lower is better)" in text


def test_summary_is_markdown_appended(page):
    md = page[1].read_text()
    assert md.startswith("earlier step\n### kvbench report: `nightsuite`, 3 runs")
    assert "| `night-c` |" in md and "[run](https://mlflow.example/#/experiments/3/runs/" in md
    assert f"`{SLOWER}` `wall_s`" in md and "**Newest run:**" in md
    assert "| config | metric | baseline | now | change | verdict |" in md


def test_bad_input(nights, cli, capsys, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(nights[0].path, other)
    meta = (other / "meta.json").read_text().replace('"nightsuite"', '"smoke"')
    (other / "meta.json").write_text(meta)
    assert cli("report", nights[0].path, other, "--out", tmp_path / "r.html") == 2
    assert "several suites" in capsys.readouterr().err
    assert cli("report", nights[0].path, nights[0].path, "--out", tmp_path / "r.html") == 2
    assert "given twice" in capsys.readouterr().err
    assert cli("report", tmp_path / "nope", "--out", tmp_path / "r.html") == 2
    assert not (tmp_path / "r.html").exists()
    capsys.readouterr()
    (tmp_path / "file").write_text("")
    assert cli("report", nights[0].path, "--out", tmp_path / "file" / "r.html") == 2
    err = capsys.readouterr().err
    assert "--out" in err and "cannot be written" in err and len(err.strip().splitlines()) == 1
    assert cli("report", nights[0].path, "--out", tmp_path / "r.html", "--summary", tmp_path / "file" / "s") == 2
    err = capsys.readouterr().err
    assert "--summary" in err and "the report" in err and (tmp_path / "r.html").exists()  # nothing lost


def test_one_run_with_a_baseline(nights, cli, capsys, tmp_path):
    base = tmp_path / "cpu.json"
    assert cli("baseline", nights[0].path, "--out", base) == 0
    assert cli("report", nights[2].path, "--baseline", base, "--out", tmp_path / "r.html") == 0
    text = (tmp_path / "r.html").read_text()
    assert "against baseline (cpu)" in text and "peak_pages_held" in text


CHROMIUM = Path("/usr/bin/chromium")


@pytest.mark.slow
def test_report_renders_in_a_real_browser(page, tmp_path):
    """Chromium headless opens the file: the trend chart, the table and a heatmap have size."""
    if not CHROMIUM.exists():
        pytest.skip("no browser: /usr/bin/chromium is absent (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            tab = browser.new_page(viewport={"width": 1200, "height": 900})
            tab.goto(page[0].resolve().as_uri())
            assert tab.title() == "kvbench report: nightsuite"
            chart = tab.locator("svg.trend").first
            box = chart.bounding_box()
            assert box and box["width"] > 100 and box["height"] > 100
            assert tab.locator("svg.trend polyline").count() >= 5  # configs with equal figures share a line
            points = tab.locator("#trend-0 circle")
            assert points.count() >= 6 and points.first.bounding_box()["width"] > 0
            rows = tab.locator("table.moves tbody tr")
            assert rows.count() >= 1 and rows.first.bounding_box()["height"] > 0
            assert "wall_s" in tab.locator("table.moves").inner_text()  # listed once, in the moved table
            assert "the moved figures are in the table above" in tab.locator("table.compare").inner_text()
            red = tab.locator("table.moves tr.regression td").first.evaluate("e => getComputedStyle(e).backgroundColor")
            assert red == "rgb(253, 232, 228)"  # a regression is drawn red
            heat = tab.locator("svg.heatmap").first.bounding_box()
            assert heat and heat["width"] > 0 and heat["height"] > 0
            tab.screenshot(path=str(tmp_path / "report.png"), full_page=True)
            # The per-config view: folded until picked in the index, then shown with its step.
            views = tab.locator("section.cfg")
            assert views.count() == 8 and all(not views.nth(i).is_visible() for i in range(8))
            tab.locator("table.configs a", has_text=REGRESSED).click()
            view = tab.locator("section.cfg:target")
            assert view.count() == 1 and view.is_visible() and REGRESSED in view.locator("h3").inner_text()
            assert "night-b" in view.locator("table.steps").inner_text()
            step = view.locator("g.step line").first.bounding_box()
            assert step and step["height"] > 50  # the step's mark spans the chart
            assert view.locator("svg.config").first.bounding_box()["width"] > 100
            assert sum(views.nth(i).is_visible() for i in range(8)) == 1  # the others stay folded
            view.screenshot(path=str(tmp_path / "config.png"))
        finally:
            browser.close()


def test_every_config_has_a_view_with_its_steps(page):
    """asv's graph per benchmark: an index of all 8 configs, REGRESSED's step found where
    it landed (night-b, one page more: the planted move), SLOWER's wall_s step in night-a."""
    text = page[0].read_text()
    index = text[text.index('<table class="configs">'):]
    index = index[:index.index("</table>")]
    assert index.count("<tr>") == 8 + 1 and text.count('<section class="cfg"') == 8
    assert "2 steps" in text
    row = next(r for r in index.split("<tr>") if f">{REGRESSED}</a>" in r)
    assert "peak_pages_held +1 (+" in row and "in night-b" in row
    row = next(r for r in index.split("<tr>") if f">{SLOWER}</a>" in r)
    assert "wall_s +0.3 (+29.9%) in night-a" in row
    # the step on its own chart, between the two runs' commits
    view = text[text.index(f"{REGRESSED}</span>") :]
    view = view[:view.index("</section>")]
    assert f"<td class=\"mono\">{C1[:10]}..{C2[:10]}</td>" in view and view.count('<g class="step">') == 1


def test_one_config_run_five_times_lies_within_the_spread_the_report_draws(results_root, cli, tmp_path):
    """The suite's repeats reach the report: each of the five timed runs of one config
    lies inside the error bar drawn for it (the bar is what a reader takes as the noise)."""
    import json

    suite = tmp_path / "five.toml"
    suite.write_text('repeat = 5\n[defaults]\nspec = "dflash"\nblock_size = 16\nnum_requests = 8\n'
                     'input_len = 64\noutput_len = 32\nmin_len = 16\n[axes]\npage_size = [16]\n')
    assert cli("sweep", suite, "--no-mlflow", "--run-id", "five") == 0
    run = results_root / "runs" / "five"
    [row] = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    samples = row["samples"]["output_tokens_per_s"]
    assert len(samples) == 5  # the warmup is not one of them
    assert cli("report", run, "--metric", "output_tokens_per_s", "--out", tmp_path / "r.html") == 0
    text = (tmp_path / "r.html").read_text()
    bars = re.findall(r'class="err"><title>[^<]*: ([^ <]+) \.\. ([^ <]+) over the repeats</title>',
                      text[:text.index('<h2 id="configs">')])  # the trend chart (the config's view repeats it)
    assert len(bars) == 1
    low, high = (float(b) for b in bars[0])
    for s in samples:  # the bar's ends are printed to 4 significant digits
        assert low * (1 - 5e-4) <= s <= high * (1 + 5e-4)
