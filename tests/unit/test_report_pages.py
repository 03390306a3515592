"""The report's pages without a sweep: synthetic result rows written as real Parquet and read back.
A large run keeps its sources out of report.html (one page per problem); the grid is a heat map
with a legend; the speedup axes are labelled 0.25x ... 4x."""

import importlib.util
import math
import re
from html import escape as html_escape

import pytest

from conftest import REPO
from pkb_ray.results import write_results
from pkb_ray.summary import RunSummary, figures, render_html
from pkb_ray.summary.cli import read_runs
from pkb_ray.summary.pages import write
from pkb_ray.summary.tables import sample_anchor

spec = importlib.util.spec_from_file_location("bench_report_size", REPO / "scripts" / "bench_report_size.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)

PAGE_BOUND = 5_000_000  # bytes of report.html at 5,000 samples (issue 30); measured: docs/benchmarks/report.md


def summary_of(n: int, tmp_path) -> RunSummary:
    write_results(bench.synthetic_results(n), tmp_path / "run" / "results")
    return RunSummary.of(read_runs([tmp_path / "run"]))


@pytest.mark.slow  # ~15 s on 2 cores: 5,000 rows summarized and 50 pages written
def test_a_large_run_keeps_its_sources_out_of_a_page_under_5_mb(tmp_path):
    summary = summary_of(5000, tmp_path)
    page, md = write(summary, tmp_path / "out")
    html = page.read_text()
    assert page.stat().st_size < PAGE_BOUND
    assert "<pre class='src'>" not in html and "<details id=" not in html  # no sample's block in the report
    files = sorted((tmp_path / "out" / "sources").glob("*.html"))
    assert [f.stem for f in files] == sorted(summary.rows["problem_id"].unique())  # one page per problem
    ids = {f.name: set(re.findall(r'<details id="([^"]+)"', f.read_text())) for f in files}
    assert sum(map(len, ids.values())) == 5000  # every result's block, once
    # each sample's block is on its problem's page, with its source
    row = summary.rows.iloc[1234]
    own = (tmp_path / "out" / "sources" / f"{row['problem_id']}.html").read_text()
    assert f'<details id="{sample_anchor(row)}">' in own and html_escape(row["source"][:60]) in own
    # every link of the grid and the per-problem table lands on a block of the page it names
    links = re.findall(r'href="(sources/[^"#]+)#([^"]+)"', html)
    assert len(links) >= 2 * len(summary.grid)  # the grid's cells and the per-problem table's "open"
    assert all(anchor in ids[target.removeprefix("sources/")] for target, anchor in links)
    assert "sources/<problem>.html" in md.read_text()


def test_a_small_run_holds_every_block_and_a_rewrite_drops_stale_source_pages(tmp_path):
    summary = summary_of(60, tmp_path)
    write(summary, tmp_path / "out", inline_samples=10)  # as if large: sources/ beside the report
    assert len(list((tmp_path / "out" / "sources").glob("*.html"))) == 1
    page, _ = write(summary, tmp_path / "out")
    html = page.read_text()
    assert html.count("<details id=") == 60 and html.count("<pre class='src'>") == 60
    assert not (tmp_path / "out" / "sources").exists()
    assert 'href="sources/' not in html and f'href="#{summary.grid["problem_000"]["model-a"].anchor}"' in html


def test_the_grid_is_a_heat_map_of_best_speedup_and_share_correct_with_a_legend(tmp_path):
    assert render_html.heat(1.0) == "#ffffff"  # as fast as the reference: no colour
    assert render_html.heat(4.0) == render_html.heat(64.0) == "#%02x%02x%02x" % render_html.FAST
    assert render_html.heat(0.25) == render_html.heat(0.01) == "#%02x%02x%02x" % render_html.SLOW
    assert render_html.heat(math.nan) == render_html.NONE
    assert render_html.heat(2.0) not in (render_html.heat(1.0), render_html.heat(4.0))
    summary = summary_of(200, tmp_path)
    html = render_html.grid_html(summary)
    cell = summary.grid["problem_001"]["model-c"]
    style = f"background-color:{render_html.heat(cell.best_speedup)};background-size:{cell.correct * 100:.0f}% 4px"
    assert f'style="{style}"' in html and f">{cell.text}</a>" in html  # coloured, its text kept
    assert f"{cell.correct:.0%} of samples correct, best correct speedup {cell.best_speedup:.2f}x" in html
    assert html.count('<td class="heat"') == sum(map(len, summary.grid.values()))
    assert "0.25x or slower" in html and "4x or faster" in html and "share of samples correct" in html


def test_speedup_axes_are_labelled_in_powers_of_two_around_1x():
    plt = figures.pyplot()
    fig, ax = plt.subplots()
    figures.speedup_axis(ax.xaxis, [0.3, 1.2, 3.9])
    text = figures.svg(fig, "t")
    assert re.findall(r">([^<>]*x)</text>", text) == ["0.25x", "0.5x", "1x", "2x", "4x"]
    fig, ax = plt.subplots()
    figures.speedup_axis(ax.yaxis, [1.5])  # one sample: still 0.5x to 2x, 1x inside
    fig.canvas.draw()
    assert [t.get_text() for t in ax.get_yticklabels()] == ["0.5x", "1x", "2x"]
    fig, ax = plt.subplots()
    figures.speedup_axis(ax.yaxis, [0.001, 300])  # a wide range: fewer ticks, 1x still among them
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert "1x" in labels and len(labels) <= 6 and labels[0] == "1/256x"
    plt.close("all")


@pytest.mark.parametrize("value, label", [(0.125, "0.125x"), (1 / 16, "1/16x"), (1.0, "1x"), (64.0, "64x")])
def test_speedup_labels(value, label):
    assert figures.speedup_label(value) == label
