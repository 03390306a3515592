"""The report's pages without a sweep: synthetic result rows written as real Parquet and read back.
A large run keeps its sources out of report.html (one page per problem); the grid is a heat map
with a legend; the speedup axes are labelled 0.25x ... 4x."""

import math
import re

import pandas as pd
import pytest

from benchmarks import report_size as bench
from pkb_ray.results.parquet import write_results
from pkb_ray.summary import RunSummary, figures, render_html
from pkb_ray.summary.cli import read_runs
from pkb_ray.summary.pages import write


def summary_of(n: int, tmp_path) -> RunSummary:
    write_results(bench.synthetic_results(n), tmp_path / "run" / "results")
    return RunSummary.of(read_runs([tmp_path / "run"]))


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
    # the share is pass@1 of the per-problem table, its Wilson interval in the tooltip; the best speedup is
    # labelled a maximum, without an interval
    score = summary.per_problem.set_index(["model", "problem_id"]).loc[("model-c", "problem_001")]
    assert (cell.correct, cell.correct_lo, cell.correct_hi, cell.samples) == (
        score["pass@1"], score["pass@1_lo"], score["pass@1_hi"], 25)
    assert 0 < cell.correct_lo < cell.correct < cell.correct_hi < 1
    assert (f"{cell.correct:.0%} [{cell.correct_lo:.0%}, {cell.correct_hi:.0%}] of 25 sample(s) correct (95 % Wilson "
            "interval), best correct "
            f"speedup {cell.best_speedup:.2f}x (the maximum of {cell.timed} correct, timed samples: "
            "no interval)") in html
    assert cell.timed == int(((summary.rows["model"] == "model-c") & (summary.rows["problem_id"] == "problem_001")
                              & (summary.rows["status"] == "correct")).sum())
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


def _cells(text: str, section: str) -> list[list[str]]:
    """The body rows of the first Markdown table of a section of report.md, as stripped cells."""
    body = text.split(f"## {section}")[1].split("\n## ")[0]
    return [[c.strip() for c in line.strip("|").split("|")] for line in body.splitlines()
            if line.startswith("| ") and not line.startswith("| ---")][1:]


def test_every_figure_of_the_report_has_its_interval_or_says_it_has_none(tmp_path):
    from pkb_ray.summary import render_markdown, render_wandb
    from pkb_ray.summary.sections import NOTES, with_interval

    summary = summary_of(200, tmp_path)
    models = sorted(summary.rows["model"].unique())
    # the curves figure: a shaded band under every line of its three panels
    svg = figures.curves(summary)
    for panel in ("pass", "fast_1.0", "fast_p"):
        assert all(f'id="curves-band-{panel}-{i}"' in svg for i in range(len(models))), panel
        assert f'id="curves-band-{panel}-{len(models)}"' not in svg
    band = svg.split('id="curves-band-fast_p-0"')[1].split("</g>")[0]
    assert band.count("L ") >= 2 * len(summary.thresholds["p"].unique()) - 1  # lo and hi at every p
    # report.md's pass@k table: each point with the band the figure shades
    md = render_markdown.page(summary, "t", "now")
    table = {(r[0], r[1]): r for r in _cells(md, "pass@k and fast_1.0@k")}
    c = summary.curves.set_index(["model", "metric", "k"])
    for model in models:
        for k, column in ((1, 2), (5, 3)):
            metric = ("pass", "fast_1.0")[column - 2]
            point = c.loc[(model, metric, k)]
            assert point["lo"] < point["value"] <= point["hi"] or point["value"] == point["hi"] == 1.0
            assert table[(model, str(k))][column] == with_interval(point["value"], point["lo"], point["hi"])
    # the grid in report.md: each cell, then its share's interval
    grid = {r[0]: r for r in _cells(md, "Models x problems")}
    cell = summary.grid["problem_001"]["model-c"]
    i = 1 + 2 * models.index("model-c")
    assert grid["problem_001"][i:i + 2] == [cell.text, f"[{cell.correct_lo:.2f}, {cell.correct_hi:.2f}]"]
    # best speedups: a maximum, said to have no interval where they are shown
    assert "best speedup (max)" in md and "maximum" in NOTES["problems"] and "without an interval" in NOTES["grid"]
    assert "no interval" in "".join(figures.sizes(pd.DataFrame([
        {"problem": "p", "W": 2, "model": "m", "bytes": 1024, "best speedup": 1.5, "reference us": 10.0,
         "best us": 6.7}])))
    # W&B's summary: fast_1.0@k has its standard error for k > 1, from pass@k's estimator
    keys = render_wandb.summary_keys(summary)
    for model in models:
        assert f"{model}/fast_1.0@1_lo" in keys and f"{model}/fast_1.0@1_se" not in keys
        for k in (5, 10):
            assert keys[f"{model}/fast_1.0@{k}_se"] == pytest.approx(_fast_se(summary.rows, model, k))
            assert 0 < keys[f"{model}/fast_1.0@{k}_se"] < 0.2
    assert keys["fast_1.0@5_se"] == pytest.approx(_fast_se(summary.rows, None, 5))


def _fast_se(rows: pd.DataFrame, model: str | None, k: int) -> float:
    """fast_1.0@k's standard error worked out from the rows: each problem's count of correct samples
    faster than 1x, pass@k's jackknife variance of it, sqrt(sum) / P."""
    from pkb_ray.results.metrics import pass_at_k_variance

    rows = rows if model is None else rows[rows["model"] == model]
    variances = []
    for _, g in rows.groupby(["model", "problem_id"]):
        fast = int(((g["status"] == "correct") & (g["speedup"] > 1.0)).sum())
        variances.append(pass_at_k_variance(len(g), fast, k))
    return math.sqrt(sum(variances)) / len(variances)


def test_a_problem_with_exactly_k_samples_leaves_fast_p_at_k_without_a_standard_error(tmp_path):
    from pkb_ray.summary import render_wandb

    keys = render_wandb.summary_keys(summary_of(210, tmp_path))  # problem_002 has 10 samples, all of model-a's
    assert "model-a/fast_1.0@5_se" in keys and "model-a/fast_1.0@10" in keys
    assert "model-a/fast_1.0@10_se" not in keys and "model-a/pass@10_se" not in keys  # as pass@k's
    assert "model-b/fast_1.0@10_se" in keys


def test_the_grids_share_leaves_out_samples_the_hardware_could_not_run(tmp_path):
    from pkb_ray.spec.names import Status

    rows = bench.synthetic_results(100)
    for i in range(5):  # five of model-a's problem_000 samples refused by the hardware
        rows[i] = rows[i].model_copy(update={"status": Status.UNSUPPORTED_HARDWARE, "speedup": None})
    write_results(rows, tmp_path / "run" / "results")
    summary = RunSummary.of(read_runs([tmp_path / "run"]))
    cell = summary.grid["problem_000"]["model-a"]
    pass1 = summary.per_problem.set_index(["model", "problem_id"]).loc[("model-a", "problem_000"), "pass@1"]
    assert cell.samples == 20 and cell.correct == pass1 and cell.text.startswith(f"{pass1:.2f}")
    assert 0 < pass1 < 1


def test_the_share_faster_than_the_reference_and_the_reference_times_have_intervals(tmp_path):
    from pkb_ray.summary import render_markdown
    from pkb_ray.summary.render_wandb_report import build
    from pkb_ray.summary.sections import NOTES, with_interval

    summary = summary_of(200, tmp_path)
    md = render_markdown.page(summary, "t", "now")
    html = render_html.page(summary, "t", "now")
    # the speedups table: the share of correct samples faster than the reference, with its 95 % interval
    speedups = summary.speedups
    assert len(speedups) and speedups["faster than reference_lo"].notna().all()
    assert ((speedups["faster than reference_lo"] <= speedups["faster than reference"])
            & (speedups["faster than reference"] <= speedups["faster than reference_hi"])).all()
    assert (speedups["faster than reference_lo"] < speedups["faster than reference_hi"]).all()
    shown = {(r[0], r[1]): r for r in _cells(md, "Speedups of correct samples")}
    for r in speedups.to_dict("records"):
        cell = with_interval(r["faster than reference"], r["faster than reference_lo"], r["faster than reference_hi"])
        assert shown[(r["category"], r["model"])][4] == cell and f"<td>{cell}</td>" in html
    ok = summary.rows[(summary.rows["status"] == "correct") & (summary.rows["model"] == "model-a")]
    first = speedups[speedups["model"] == "model-a"].iloc[0]
    assert first["faster than reference"] == pytest.approx((ok[ok["category"] == first["category"]]["speedup"]
                                                           > 1).mean())
    assert "95 %" in NOTES["speedups"]
    # W&B: the same share per category (its table) and over each model (the summary), with its interval
    keys = summary.scalars
    assert keys["model-a/faster_share_lo"] <= keys["model-a/faster_share"] <= keys["model-a/faster_share_hi"]
    # the per-problem table: the reference's median time with its interval over the samples' measurements
    problems = summary.problems
    ref = problems["reference us"]
    assert ((problems["reference us_lo"] <= ref) & (ref <= problems["reference us_hi"])).all()
    assert (problems["reference us_lo"] < problems["reference us_hi"]).all()
    row = problems.iloc[0]
    assert with_interval(row["reference us"], row["reference us_lo"], row["reference us_hi"]) in md.split(
        "## Per problem")[1].split("\n## ")[0]
    # the W&B Report's headline bars (a bar panel draws no error bar): each title says its interval
    import wandb_workspaces.reports.v2 as wr

    report = build(summary, "team", "pkb_ray", "run1", "t")
    bars = [p.title for b in report.blocks if isinstance(b, wr.PanelGrid) for p in b.panels
            if isinstance(p, wr.BarPlot)]
    assert bars == [f"pass@1 {with_interval(keys['pass@1'], keys['pass@1_lo'], keys['pass@1_hi'])}"
                    " (95 % Wilson interval)",
                    f"fast_1.0@1 {with_interval(keys['fast_1.0@1'], keys['fast_1.0@1_lo'], keys['fast_1.0@1_hi'])}"
                    " (95 % Wilson interval)",
                    "geomean_speedup " + with_interval(keys["geomean_speedup"], keys["geomean_speedup_lo"],
                                                       keys["geomean_speedup_hi"]) + " (95 % bootstrap interval)"]
    # the per-problem table: pass@1 with its Wilson interval, not its standard error
    row = problems.iloc[0]
    cell = with_interval(row["pass@1"], row["pass@1_lo"], row["pass@1_hi"])
    assert row["pass@1_lo"] < row["pass@1_hi"] and f"| {cell} |" in md.split("## Per problem")[1].split("\n## ")[0]


def test_the_across_nodes_ratio_has_an_interval_from_the_references_measurements(tmp_path):
    from pkb_ray.summary import render_markdown
    from pkb_ray.summary.sections import NOTES, with_interval

    rows = bench.synthetic_results(50)  # model-a and model-b, 25 samples each of problem_000
    spread = [r.model_copy(update={"nodes": 2, "ref_time_us": r.ref_time_us * (2.4 + 0.05 * (i % 5))})
              for i, r in enumerate(rows) if r.model == "model-a" and r.ref_time_us]
    lonely = next(r for r in rows if r.model == "model-b" and r.ref_time_us)  # one measurement across nodes
    spread.append(lonely.model_copy(update={"nodes": 2, "world_size": 4, "ref_time_us": 50.0}))
    write_results(rows + spread, tmp_path / "run" / "results")
    summary = RunSummary.of(read_runs([tmp_path / "run"]))
    nodes = summary.across_nodes.set_index(["model", "layout"])
    a = nodes.loc[("model-a", "2x1")]
    assert a["across / one node_lo"] < a["across / one node"] < a["across / one node_hi"]
    assert a["ref one node (us)_lo"] < a["ref one node (us)"] < a["ref one node (us)_hi"]
    assert a["ref across nodes (us)_lo"] < a["ref across nodes (us)"] < a["ref across nodes (us)_hi"]
    md = render_markdown.page(summary, "t", "now")
    line = next(r for r in _cells(md, "Across nodes") if r[0] == "model-a")
    assert line[5] == with_interval(a["across / one node"], a["across / one node_lo"], a["across / one node_hi"])
    assert " [" in line[3] and " [" in line[4]
    # W=4 has no one-node measurement and one across nodes: no interval, and the note says why
    b = nodes.loc[("model-b", "2x2")]
    assert math.isnan(b["across / one node_lo"]) and math.isnan(b["ref across nodes (us)_lo"])
    assert "fewer than two measurements" in NOTES["nodes"]


def test_a_size_sweeps_reference_time_has_an_interval_over_its_measurements():
    from pkb_ray.summary import sizes
    from pkb_ray.summary.sections import NOTES

    rows = pd.DataFrame([dict(model="m", problem_id="p", base_problem="p", world_size=2, hardware="h", size=size,
                              message_bytes=b, status="correct", speedup=1.5, timing_mode="graph",
                              ref_time_us=t * (1 + 0.05 * i), cand_time_us=t / 1.5)
                         for size, b, t in (("numel=1", 4, 10.0), ("numel=2", 8, 20.0)) for i in range(4)])
    table = sizes.table(rows)
    assert ((table["reference us_lo"] < table["reference us"]) & (table["reference us"] < table["reference us_hi"])).all()
    assert "95 %" in NOTES["sizes"]
    svg = figures.sizes(table)
    assert "shaded: 95 %" in svg


def test_summary_json_holds_the_headline_figures_and_tables(tmp_path):
    """summary.json: what the text table shows, for machines (a CI gate reads pass@1 from it)."""
    import json

    from pkb_ray.summary import render_json

    summary = summary_of(12, tmp_path)
    doc = json.loads(render_json.write(summary, tmp_path, "t").read_text())
    assert doc["scalars"]["pass@1"] == pytest.approx(summary.scalars["pass@1"])
    assert doc["statuses"] == {k: int(v) for k, v in summary.statuses.items()}
    assert len(doc["per_problem"]) == len(summary.per_problem) and doc["overall"][0]["model"]
    assert "NaN" not in (tmp_path / "summary.json").read_text()  # nothing to score is null, valid JSON


def test_tables_leave_out_columns_with_nothing_in_them():
    """A run with no speed-of-light bound shows no SOL column (it read '-' in every row)."""
    import math

    import pandas as pd

    from pkb_ray.summary.sections import fold

    df = pd.DataFrame({"model": ["a", "b"], "pass@1": [0.5, 1.0], "pass@1_se": [0.1, 0.0],
                       "median_sol_fraction": [math.nan, math.nan], "median_sol_fraction_lo": [math.nan] * 2,
                       "median_sol_fraction_hi": [math.nan] * 2, "speedup": [1.2, math.nan]})
    shown = fold(df)
    assert list(shown.columns) == ["model", "pass@1", "speedup"]
    assert shown["pass@1"].tolist() == ["0.5±0.1", "1±0"]  # a column with something in it stays
    both = fold(df.assign(**{"pass@1_lo": [0.3, 0.7], "pass@1_hi": [0.7, 1.0]}))
    assert list(both.columns) == ["model", "pass@1", "speedup"]
    assert both["pass@1"].tolist() == ["0.5 [0.3, 0.7]", "1 [0.7, 1]"]  # an interval where there is one, not the SE


def test_a_report_over_models_of_different_problems_compares_the_common_ones():
    """Two runs whose models saw different problems: scored on the problems both have, and the
    note names what was left out; models of the same problems are left alone."""
    import pandas as pd

    from pkb_ray.summary.cli import common_problems

    df = pd.DataFrame({"model": ["a", "a", "a", "b", "b"], "problem_id": ["p1", "p2", "p3", "p1", "p2"]})
    kept, note = common_problems(df)
    assert sorted(set(kept.problem_id)) == ["p1", "p2"] and len(kept) == 4
    assert note.endswith("compared on the 2 they share; left out: a: p3")
    same = df[df.problem_id != "p3"]
    assert common_problems(same)[1] == "" and len(common_problems(same)[0]) == 4


def test_a_multiruns_jobs_over_the_same_samples_are_entries_of_their_own(tmp_path, capsys):
    """Two jobs of a multirun (eager and graph timing) evaluated the same samples: neither's rows
    replace the other's (the report said "2 results" for 4 rows); each job is its own model entry.
    A folder named twice is still read once."""
    from pkb_ray.summary.cli import main, read_rows

    results = bench.synthetic_results(8)
    sweep = tmp_path / "multirun"
    for job in ("0_eval.timing_mode=eager", "1_eval.timing_mode=graph"):
        write_results(results, sweep / job / "results")
    df, read, renamed = read_rows([sweep, sweep / "0_eval.timing_mode=eager"])
    assert len(df) == read == 16
    assert sorted(df["model"].unique()) == renamed == ["model-a [0_eval.timing_mode=eager]",
                                                       "model-a [1_eval.timing_mode=graph]"]
    assert main([str(sweep), "--out", str(tmp_path / "rep")]) == 0
    said = capsys.readouterr()
    assert said.out.startswith("16 results ->") and "each is an entry of its own" in said.err
    alone, _, renamed = read_rows([sweep / "0_eval.timing_mode=eager"])
    assert len(alone) == 8 and renamed == [] and set(alone["model"]) == {"model-a"}
