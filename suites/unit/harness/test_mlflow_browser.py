"""The MLflow UI as a user sees it: a real sweep, `kvbench ui`, Debian's Chromium headless.

A sweep of two configs goes into a temporary results root; `kvbench ui` serves
that store on a free loopback port and prints the runs view of the experiment;
Playwright drives /usr/bin/chromium through it. What must hold: the runs view
lists the sweep; a config run's metrics page opens on its headline section (peak
token slots held, stranded and leaked slots, the verdict), titles drawn whole, then
the schema's groups as sections (memory, invariants, ...), not one flat list of
charts; the sweep's parent opens on its own headline (configs and violations not as
expected, leaked and peak slots); comparing config runs starts on peak token slots held.

Skips when there is no browser or no Playwright (`apt-get install chromium`,
`pip install -e '.[test]'`). KVBENCH_BROWSER_SHOTS=DIR keeps the screenshots.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from harness.core.metrics import HEADLINE, HEADLINE_SECTION, HEADLINE_VERDICT, SWEEP_HEADLINE, lookup

CHROMIUM = Path("/usr/bin/chromium")
FILTER = "dflash and ps:16 and win:none and not free and not model and (profile:sglang-0.5.23 or pre-35265)"  # 0.5.23 and pre-35265
START_S = 240  # a loaded CI machine takes minutes to start the server
PAGE_MS = 90_000

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def browser():
    if not CHROMIUM.exists():
        pytest.skip(f"no browser at {CHROMIUM} (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install -e '.[test]')")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def ui(results_root: Path, tmp_path: Path):
    """`kvbench ui` on a free port; yields (base URL, runs view URL); always stopped."""
    port = free_port()
    log = tmp_path / "ui.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "ui", "--port", str(port)],
                                env=dict(os.environ, KVBENCH_RESULTS=str(results_root)), stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        end = time.monotonic() + START_S
        while True:
            assert proc.poll() is None, f"kvbench ui exited: {log.read_text()[-2000:]}"
            assert time.monotonic() < end, f"the MLflow UI did not come up in {START_S} s: {log.read_text()[-2000:]}"
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        # kvbench ui prints its links once the server answers: wait for them as a user does.
        while not (found := re.search(r"kvbench-smoke: (\S+)", log.read_text())):
            assert time.monotonic() < end and proc.poll() is None, log.read_text()[-2000:]
            time.sleep(0.2)
        yield base, found.group(1)
    finally:
        # The whole process group: kvbench ui, mlflow, its uvicorn workers.
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
            if sig == signal.SIGTERM:
                time.sleep(2)  # let the server's children go before the group is killed
        proc.wait()


def shot(page, tmp_path: Path, name: str, full_page: bool = True) -> None:
    path = tmp_path / name
    page.screenshot(path=str(path), full_page=full_page)
    keep = os.environ.get("KVBENCH_BROWSER_SHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(keep) / name)


SECTION = re.compile(r"^(.+)\n\((\d+)\)\nAdd chart$", re.M)  # a chart section's header: name, (count), button
# Whether a text is drawn whole: the box of its text inside its nearest clipping ancestor
# (MLflow cuts a long title with an ellipsis: `memory/peak_tokens_h...`).
WHOLE = """e => { const r = document.createRange(); r.selectNodeContents(e); const t = r.getBoundingClientRect();
  for (let a = e; a; a = a.parentElement) { const s = getComputedStyle(a);
    if (s.overflowX !== 'visible' || s.textOverflow === 'ellipsis') {
      const b = a.getBoundingClientRect(); return t.left >= b.left - 1 && t.right <= b.right + 1; } }
  return true; }"""


def drawn_whole(page, text: str) -> bool:
    return page.get_by_text(text, exact=True).first.evaluate(WHOLE)


def test_the_runs_view_lists_the_sweep_and_a_config_run_opens_on_its_headline(results_root, cli, tmp_path,
                                                                              browser, request):
    assert cli("sweep", "smoke", "--filter", FILTER, "--run-id", "web1", "-j", "1") == 0
    from harness.view.mlflow_log import client

    cl = client(f"sqlite:///{results_root / 'mlflow.db'}")
    exp = cl.get_experiment_by_name("kvbench-smoke").experiment_id
    kids = cl.search_runs([exp], filter_string="tags.`kvbench.role` = 'config' and tags.hardware_profile = 'cpu'")
    assert len(kids) == 2  # config runs carry the sweep's tags
    unaligned = next(k for k in kids if k.data.tags["profile"] == "sglang-pre-35265")

    base, runs_url = request.getfixturevalue("ui")
    from harness.view.mlflow_views import runs_query

    assert runs_url == f"{base}/#/experiments/{exp}/runs?{runs_query()}"
    page = browser.new_page(viewport={"width": 1500, "height": 1000})
    page.set_default_timeout(PAGE_MS)

    page.goto(runs_url)
    page.get_by_text("web1", exact=True).first.wait_for()  # the sweep's parent run
    assert "Runs" in page.inner_text("body")
    shot(page, tmp_path, "runs.png")

    page.goto(f"{base}/#/experiments/{exp}/runs/{unaligned.info.run_id}/model-metrics?workflowType=machine_learning")
    # The first section is the headline (it was engine/, counters of zeros): its four
    # cards, titled whole by names that carry their unit, each figure in the first screen.
    page.get_by_text("Add chart").first.wait_for()  # a section's header is drawn
    sections = SECTION.findall(page.inner_text("body"))
    assert sections and sections[0] == (HEADLINE_SECTION, "4"), sections
    held = unaligned.data.metrics[lookup("peak_tokens_held").mlflow_name]
    page.get_by_text(f"{held:.2f}", exact=True).first.wait_for()  # the bar's label: its figure is drawn
    shot(page, tmp_path, "config-first-screen.png", full_page=False)
    for card in (*HEADLINE, HEADLINE_VERDICT):
        assert in_first_screen(page, card) and drawn_whole(page, card), card
    assert in_first_screen(page, f"{held:.2f}")
    # A section header is the group alone, its cards are titled by the name after the
    # group. MLflow draws a card only once it scrolls into view, and a section of 15
    # cards is taller than the window, so find each card as a user would: type its name
    # into the page's chart search.
    search = page.get_by_placeholder("Search metric charts")
    for section, card in (("memory", "peak_pages_held"), ("invariants", "violations"), ("throughput", "output_tokens_per_s")):
        search.fill("")  # every section again
        page.get_by_text(section, exact=True).first.wait_for()
        search.fill(card)
        page.get_by_text(card, exact=True).first.wait_for()
        assert page.get_by_text(section, exact=True).first.is_visible()  # still under its group
    search.fill("")
    shot(page, tmp_path, "config-metrics.png")
    assert "memory/peak_pages_held" not in page.inner_text("body")  # no flat list of full names

    # The parent opens on its own headline (it opened on memory/leaked_tokens.sum, one chart
    # of 0.00 per axis value): the night's verdict and peaks, titled whole, in the first screen.
    from harness.view.mlflow_log import find_parent

    parent = cl.get_run(find_parent(cl, exp, "web1"))
    page.goto(f"{base}/#/experiments/{exp}/runs/{parent.info.run_id}/model-metrics?workflowType=machine_learning")
    page.get_by_text("Add chart").first.wait_for()
    sections = SECTION.findall(page.inner_text("body"))
    assert sections and sections[0] == (HEADLINE_SECTION, str(len(SWEEP_HEADLINE))), sections
    peak = parent.data.metrics[f"{HEADLINE_SECTION}/peak_tokens_held.max"]
    assert peak == max(k.data.metrics[lookup("peak_tokens_held").mlflow_name] for k in kids) > 0
    page.get_by_text(f"{peak:.2f}", exact=True).first.wait_for()
    shot(page, tmp_path, "parent-first-screen.png", full_page=False)
    for card, _, _ in SWEEP_HEADLINE:
        assert in_first_screen(page, card) and drawn_whole(page, card), card
    assert in_first_screen(page, f"{peak:.2f}")


def in_first_screen(page, text: str, wait: bool = True) -> bool:
    """Whether ``text`` is drawn inside the window as it opens, without scrolling (in any
    of the places it appears: a tag above the fold, the description below it)."""
    found = page.get_by_text(text)
    if wait:
        found.first.wait_for()
    view = page.viewport_size
    boxes = [found.nth(i).bounding_box() for i in range(found.count())]
    return any(b is not None and 0 <= b["y"] < view["height"] and b["x"] < view["width"] for b in boxes)


def test_a_run_opens_on_memory_in_tokens_its_configs_have_distinct_names_and_compare_starts_on_the_headline(
        results_root, cli, tmp_path, browser, request):
    from harness.core.run_names import short_name
    from harness.view.mlflow_log import client

    assert cli("sweep", "smoke", "--filter", FILTER, "--run-id", "web2", "-j", "1") == 0
    cl = client(f"sqlite:///{results_root / 'mlflow.db'}")
    exp = cl.get_experiment_by_name("kvbench-smoke")
    assert "token slots" in exp.tags["mlflow.note.content"]  # the experiment says how to read it
    kids = cl.search_runs([exp.experiment_id], filter_string="tags.`kvbench.role` = 'config'")
    names = sorted(k.info.run_name for k in kids)
    assert names == sorted(short_name(k.data.tags["kvbench.test_id"]) for k in kids)
    assert len(set(names)) == 2 and all(n.startswith("dflash ps16") for n in names)
    kid = kids[0]
    tokens = int(kid.data.metrics[lookup("peak_tokens_held").mlflow_name])
    assert tokens == 16 * int(kid.data.metrics["memory/peak_pages_held"])

    base, runs_url = request.getfixturevalue("ui")
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.set_default_timeout(PAGE_MS)
    page.goto(f"{base}/#/experiments/{exp.experiment_id}/runs/{kid.info.run_id}?workflowType=machine_learning")
    # The run's first screen: its name, and its memory in token slots, not pages alone.
    assert kid.data.tags["peak_memory"] == f"{tokens:,} token slots held"
    assert in_first_screen(page, f"{tokens:,} token slots held")
    assert in_first_screen(page, kid.info.run_name)
    shot(page, tmp_path, "config-overview.png")
    # The runs view of the parent: both config runs, each under its own name.
    page.goto(runs_url)
    page.get_by_text("web2", exact=True).first.wait_for()
    # MLflow nests config runs under their parent, collapsed: its row's icon button expands it.
    row = page.locator("[role=row]").filter(has=page.get_by_text("web2", exact=True))
    row.first.locator("button[type=button]").first.click()
    for name in names:
        page.get_by_text(name, exact=True).first.wait_for()
    shot(page, tmp_path, "runs-named.png")
    # The headline view (harness/view/mlflow_views.py): the table's columns are the peak
    # token slots held, stranded and leaked, each config's figure in its row.
    heads = page.locator("[role=columnheader]").all_inner_texts()
    assert any(lookup("peak_tokens_held").mlflow_name in h for h in heads), heads
    kid_row = page.locator("[role=row]").filter(has=page.get_by_text(kid.info.run_name, exact=True)).first
    index = kid_row.get_attribute("aria-rowindex")  # the grid draws a row's pinned name apart from its figures
    cells = " ".join(page.locator(f"[role=row][aria-rowindex='{index}']").all_inner_texts()).split()
    assert str(tokens) in cells, cells
    # Compare the two config runs as a user does (tick them, Compare): MLflow's compare
    # view starts on the first metric a run logged, once engine/aborted_requests (all 0).
    for name in names:
        index = page.locator("[role=row]").filter(has=page.get_by_text(name, exact=True)).first.get_attribute("aria-rowindex")
        page.locator(f"[role=row][aria-rowindex='{index}'] input.ag-checkbox-input").first.check()
    page.get_by_role("button", name=re.compile("^Compare")).first.click()
    page.get_by_text("Parallel Coordinates Plot").first.wait_for()
    page.get_by_role("button", name="Clear All").wait_for()  # the plot's pickers, a metric picked
    assert not in_first_screen(page, "engine/aborted_requests", wait=False)
    assert in_first_screen(page, lookup("peak_tokens_held").mlflow_name)  # the metric picked, and the plot's axis
    shot(page, tmp_path, "compare.png", full_page=False)
    # The parent's link (the report's and the bot's) opens on the model-training pages, not GenAI's.
    from harness.store.links import mlflow_link

    link = mlflow_link(results_root / "runs" / "web2", base)
    assert link.endswith("?workflowType=machine_learning")
    page.goto(link)
    page.get_by_text("web2", exact=True).first.wait_for()
    assert not page.get_by_text("Judges", exact=True).first.is_visible()  # GenAI's sidebar
    shot(page, tmp_path, "parent-overview.png")
