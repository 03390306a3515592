"""The report page in a real headless Chromium (Debian's, installed by scripts/setup.sh), driven by
Playwright: it loads alone, every link lands, and a grid cell or a link opens that sample's block."""

import shutil

import pytest

from pkb_ray.results.parquet import write_results
from pkb_ray.summary import RunSummary
from pkb_ray.summary.cli import read_runs
from pkb_ray.summary.pages import write
from pkb_ray.summary.render_html import heat
from pkb_ray.summary.tables import sample_anchor
from test_report import results

playwright = pytest.importorskip("playwright.sync_api")
CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium (scripts/setup.sh installs Debian's)")
# As root on a machine with a closed network: no sandbox, and no background connections.
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """The report of two models over three problems; strong's best all_gather sample has per-rank times."""
    tmp = tmp_path_factory.mktemp("report")
    rows = results()
    for i, r in enumerate(rows):
        if (r.model, r.problem_id, r.sample_index) == ("strong", "all_gather", 3):
            rows[i] = r.model_copy(update={"ref_median_us": [30.0, 31.0], "ref_iqr_us": [0.5, 0.6],
                                           "cand_median_us": [10.0, 10.5], "cand_iqr_us": [0.2, 0.25]})
    write_results(rows, tmp / "run" / "results")
    df = read_runs([tmp / "run"])
    page, _ = write(RunSummary.of(df, {"W&B run": "https://wandb.ai/team/p/runs/abc"}), tmp / "out", title="two models")
    best = df[(df["model"] == "strong") & (df["problem_id"] == "all_gather") & (df["sample_index"] == 3)].iloc[0]
    return page, sample_anchor(best)


@pytest.fixture(scope="module")
def large_report(report, tmp_path_factory):
    """The same rows written as a large run's report: each problem's blocks on a page of its own."""
    tmp = report[0].parent.parent
    page, _ = write(RunSummary.of(read_runs([tmp / "run"])), tmp / "large", title="as large", inline_samples=0)
    return page, report[1]


@pytest.fixture
def browser_page():
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1200, "height": 800})
        errors, requests = [], []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("request", lambda r: requests.append(r.url))
        yield page, errors, requests
        browser.close()


IN_VIEW = ("s => { const e = document.querySelector(s); const r = e.getBoundingClientRect();"
           " return r.height > 0 && r.top > -2 && r.top < innerHeight; }")  # subpixel
OPEN_IN_VIEW = f"s => document.querySelector(s).open && ({IN_VIEW})(s)"


def settles(page, predicate: str, selector: str) -> bool:
    """Whether ``predicate(selector)`` becomes true within 5 s (navigation and scrolling are async)."""
    try:
        page.wait_for_function(predicate, arg=selector, timeout=5000)
        return True
    except playwright.TimeoutError:
        return False


def test_the_page_loads_alone_and_every_link_lands(report, browser_page, tmp_path):
    path, _ = report
    page, errors, requests = browser_page
    page.goto(path.as_uri())
    assert errors == []
    assert requests == [path.as_uri()]  # self-contained: nothing else is fetched
    ids = page.eval_on_selector_all("[id]", "els => els.map(e => e.id)")
    assert len(ids) == len(set(ids))  # one id per section and per result
    targets = page.eval_on_selector_all('a[href^="#"]', "els => els.map(e => e.getAttribute('href').slice(1))")
    assert targets and sorted(set(targets) - set(ids)) == []
    boxes = page.eval_on_selector_all("svg", "els => els.map(e => e.getBoundingClientRect().width)")
    assert len(boxes) == 3 and min(boxes) > 200  # the three figures are drawn
    page.click('nav a[href="#samples"]')
    assert settles(page, IN_VIEW, "#samples h2")
    page.screenshot(path=str(tmp_path / "report.png"))


def test_a_grid_cell_opens_its_best_sample(report, browser_page):
    path, anchor = report
    page, errors, _ = browser_page
    page.goto(path.as_uri())
    block = f"details#{anchor}"
    assert page.eval_on_selector(block, "e => e.open") is False
    page.click(f'#grid a[href="#{anchor}"]')
    assert settles(page, OPEN_IN_VIEW, block)
    text = page.inner_text(block)
    assert "strong / all_gather #3" in text and "correct, 3x" in text
    assert "# strong all_gather 3" in page.inner_text(f"{block} pre.src")  # its source
    ranks = page.inner_text(f"{block} table")
    assert "reference IQR" in ranks and "10.5" in ranks and "0.25" in ranks  # per-rank medians and spread
    assert errors == []


def test_an_address_with_a_sample_opens_it_and_the_run_links_to_wandb(report, browser_page):
    path, anchor = report
    page, _, _ = browser_page
    page.goto(f"{path.as_uri()}#{anchor}")
    assert settles(page, OPEN_IN_VIEW, f"details#{anchor}")
    other = page.get_attribute('#problems a[href^="#s-"] >> nth=0', "href")  # the per-problem table's links too
    page.click(f'#problems a[href="{other}"]')
    assert settles(page, OPEN_IN_VIEW, f"details{other}")
    assert page.get_attribute('#run a[href^="https://"]', "href") == "https://wandb.ai/team/p/runs/abc"


def test_a_large_runs_grid_cell_opens_its_sample_on_the_problems_page(large_report, browser_page):
    path, anchor = large_report
    page, errors, _ = browser_page
    page.goto(path.as_uri())
    cell = f'#grid a[href="sources/all_gather.html#{anchor}"]'
    # the heat map: strong's all_gather (best 3x) is coloured as the renderer says, its text kept
    assert page.inner_text(cell) == "0.50 / 3.00x"
    colour = page.eval_on_selector(cell, "a => getComputedStyle(a.parentElement).backgroundColor")
    assert colour == "rgb({}, {}, {})".format(*(int(heat(3.0)[i:i + 2], 16) for i in (1, 3, 5)))
    page.click(cell)
    assert settles(page, OPEN_IN_VIEW, f"details#{anchor}")
    assert page.url == (path.parent / "sources" / "all_gather.html").as_uri() + f"#{anchor}"
    assert "# strong all_gather 3" in page.inner_text(f"details#{anchor} pre.src")
    page.click("a[href='../report.html']")  # and back
    assert page.url == path.as_uri() and errors == []


def test_every_table_fits_a_1280_px_window_and_a_printed_page(report):
    """No table is wider than a 1280-px window, nor than an A4 page printed (about 720 px of CSS
    at 96 dpi less the margins): a wide table scrolls or wraps inside its own box instead."""
    path, _ = report
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            for width, media in ((1280, "screen"), (720, "print")):
                page = browser.new_page(viewport={"width": width, "height": 900})
                page.emulate_media(media=media)
                page.goto(path.as_uri())
                widest = page.eval_on_selector_all(
                    "table", "els => Math.max(...els.map(e => e.getBoundingClientRect().right))")
                page_width = page.evaluate("document.documentElement.scrollWidth")
                assert widest <= width and page_width <= width, (media, width, widest, page_width)
                page.close()
        finally:
            browser.close()
