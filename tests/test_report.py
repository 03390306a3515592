"""The report: a small results set written as real Parquet, read back, turned into HTML and Markdown."""

import json
import subprocess
import sys

import pytest

from conftest import REPO
from pkb_ray.results.metrics import curves
from pkb_ray.results.parquet import write_results
from pkb_ray.spec.names import Status
from pkb_ray.spec.schema import Result, Sample
from pkb_ray.summary import RunSummary
from pkb_ray.summary.cli import read_runs
from pkb_ray.summary.pages import write as write_pages
from pkb_ray.summary.sections import SECTIONS

# model -> problem -> (status, speedup) per sample
PLAN = {
    "strong": {"all_reduce": [("correct", 2.0), ("correct", 1.5), ("wrong_output", None), ("correct", 0.8)],
               "all_gather": [("correct", 1.2), ("timeout", None), ("compile_error", None), ("correct", 3.0)],
               "gemm_rs": [("correct", 0.5), ("crash", None), ("correct", 1.1), ("runtime_error", None)]},
    "weak": {"all_reduce": [("correct", 0.9), ("wrong_output", None), ("wrong_output", None), ("compile_error", None)],
             "all_gather": [("timeout", None), ("correct", 0.7), ("invalid_sample", None), ("import_error", None)],
             "gemm_rs": [("compile_error", None), ("compile_error", None), ("correct", 1.05), ("crash", None)]},
}
CATEGORY = {"all_reduce": "collective", "all_gather": "collective", "gemm_rs": "gemm"}


def results(hardware: str = "h200_2") -> list[Result]:
    out = []
    for model, problems in PLAN.items():
        for pid, samples in problems.items():
            for i, (status, speedup) in enumerate(samples):
                s = Sample(problem_id=pid, model=model, sample_index=i, source=f"# {model} {pid} {i}\n")
                out.append(Result.for_sample(s, Status(status), "" if status == "correct" else f"{status} here",
                                             world_size=2, hardware=hardware, category=CATEGORY[pid],
                                             speedup=speedup, sol_fraction=speedup and speedup / 10))
    return out


def write(df, out_dir, title="pkb_ray report", run_info=None):
    return write_pages(RunSummary.of(df, run_info), out_dir, title)


@pytest.fixture
def run_dir(tmp_path):
    write_results(results(), tmp_path / "run" / "results")
    return tmp_path / "run"


def test_report_has_every_section_with_the_right_numbers(run_dir, tmp_path):
    df = read_runs([run_dir])
    assert len(df) == 24
    page, md = write(df, tmp_path / "out", title="two models")
    html, text = page.read_text(), md.read_text()
    for key, heading in SECTIONS.items():
        assert f'id="{key}"' in html and f"## {heading}" in text
    assert html.count("<svg") == 3  # curves, speedups, failures
    assert "<script src" not in html and "<link" not in html and 'src="http' not in html  # self-contained
    # leaderboard: strong first; pass@1 = mean over problems of correct share (3/4, 2/4, 2/4)
    board = text.split("## Leaderboard")[1].split("##")[0]
    lines = [line for line in board.splitlines() if line.startswith("| 1 ") or line.startswith("| 2 ")]
    assert lines[0].startswith("| 1 | strong |") and lines[1].startswith("| 2 | weak |")
    # (0.75 + 0.5 + 0.5) / 3, SE sqrt(3/4 * 1/4 / 3 + 2 * 1/2 * 1/2 / 3) / 3 = 0.16 (metrics.pass_at_k_variance):
    # its Wilson interval over n_eff = p (1 - p) / SE^2 = 9.5 of the 12 samples
    assert "| 0.583 [0.294, 0.825] |" in lines[0]
    # per problem: strong's best all_gather speedup is 3 with SOL fraction 0.3
    # SE sqrt(1/4 / 3): n_eff = 1/4 / SE^2 = 3 of the 4 samples
    assert "| all_gather | collective | strong | 4 | 0.5 [0.125, 0.875] | 3 | 0.3 |" in text
    # failures: weak has 3 compile errors
    assert "weak" in text and "compile_error" in text
    # every result has a block to open, and the per-problem table links each best sample to its block
    assert html.count("<details id=") == len(df) and html.count(">open</a>") == 6
    best = text.split("## Per problem")[1]
    # no reference or sample times in these rows: those columns, empty, are left out (issue 54)
    assert "reference us" not in best and "best IQR us" not in best and "SOL fraction of best" in best
    # the grid: strong's all_gather is 2 of 4 correct, best 3x
    assert "| all_gather | 0.50 / 3.00x |" in text.split("## Models x problems")[1]
    assert "| hardware | h200_2 |" in text.split("## The run")[1]


def test_curves_start_at_pass1_and_reach_pass_at_n(run_dir):
    df = read_runs([run_dir])
    c = curves(df, ["model"], ps=(1.0,))
    strong = c[(c["model"] == "strong") & (c["metric"] == "pass")].set_index("k")["value"]
    assert strong[1] == pytest.approx((3 / 4 + 2 / 4 + 2 / 4) / 3) and strong[4] == 1.0
    weak_fast = c[(c["model"] == "weak") & (c["metric"] == "fast_1.0")].set_index("k")["value"]
    assert weak_fast[4] == pytest.approx(1 / 3)  # only gemm_rs has a correct sample faster than 1x
    assert list(strong.index) == [1, 2, 3, 4]


def test_two_runs_of_one_model_on_two_machines_are_told_apart_and_reruns_count_once(run_dir, tmp_path):
    write_results(results("h100_8"), tmp_path / "other" / "results")
    df = read_runs([run_dir, tmp_path / "other", run_dir / "results"])  # run_dir twice: counted once
    assert len(df) == 48
    _, md = write(df, tmp_path / "out")
    assert "strong @ h100_8" in md.read_text() and "strong @ h200_2" in md.read_text()


def test_the_script_writes_the_page_and_names_a_missing_folder(run_dir, tmp_path):
    ok = subprocess.run([sys.executable, str(REPO / "scripts/report.py"), str(run_dir), "--out", str(tmp_path / "r")],
                        capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "r" / "report.html").stat().st_size > 10_000
    bad = subprocess.run([sys.executable, str(REPO / "scripts/report.py"), str(tmp_path / "nowhere")],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "nowhere" in bad.stderr


def test_refined_samples_count_once_and_each_round_is_shown(tmp_path):
    rows = results()
    # weak's two wrong all_reduce answers are refined into correct ones in round 1
    for r in [r for r in rows if r.model == "weak" and r.problem_id == "all_reduce" and r.status == "wrong_output"]:
        s = Sample(problem_id="all_reduce", model="weak", sample_index=r.sample_index, source=r.source + "# v2\n",
                   metadata={"round": "1"})
        rows.append(Result.for_sample(s, Status.CORRECT, world_size=2, hardware="h200_2", category="collective",
                                      speedup=1.3, sol_fraction=0.13))
    write_results(rows, tmp_path / "run" / "results")
    df = read_runs([tmp_path / "run"])
    assert len(df) == 26 and set(df["round"]) == {0, 1}
    page, md = write(df, tmp_path / "out")
    text = md.read_text()
    board = text.split("## Leaderboard")[1].split("##")[0]
    weak = next(line for line in board.splitlines() if "| weak |" in line)
    assert "| 12 |" in weak  # still 12 samples: the refined versions replace the first answers
    assert "| 0.417 [0.191, 0.684] |" in weak  # pass@1 = (3/4 + 1/4 + 1/4) / 3 after round 1 (was 0.25)
    rounds = text.split("## After each refinement round")[1]
    assert "| weak | 0 | 12 | 0.25 [0.0764, 0.573] |" in rounds
    assert "| weak | 1 | 12 | 0.417 [0.191, 0.684] |" in rounds
    assert 'id="refinement"' in page.read_text()


def test_spread_results_get_their_own_section_and_do_not_count_as_more_samples(tmp_path):
    rows = results()
    spread = []
    for r in rows:
        if r.model == "strong" and r.problem_id == "all_reduce":
            r.ref_time_us = 40.0  # inside one node
            spread.append(r.model_copy(update={"nodes": 2, "ref_time_us": 100.0, "finished_at": r.finished_at}))
    write_results(rows + spread, tmp_path / "run" / "results")
    df = read_runs([tmp_path / "run"])
    assert len(df) == 28 and int((df["nodes"] == 2).sum()) == 4
    page, md = write(df, tmp_path / "out")
    text = md.read_text()
    assert "## Across nodes" in text and 'id="nodes"' in page.read_text()
    # the reference is 2.5x slower across nodes; the best correct speedup is 2 on both; four equal
    # measurements a side: zero-width intervals
    assert "| strong | all_reduce | 2x1 | 40 [40, 40] | 100 [100, 100] | 2.5 [2.5, 2.5] | 2 | 2 |" in text
    # the leaderboard still counts 4 samples of strong/all_reduce (pass@1 unchanged)
    board = text.split("## Leaderboard")[1].split("##")[0]
    assert "| 0.583 [0.294, 0.825] |" in board
    # and W&B gets the same table (a real offline run, read back from its files)
    from pkb_ray.spec.config import WandbConfig
    from pkb_ray.summary.tracking import Tracker

    tracker = Tracker(WandbConfig(mode="offline"), {}, tmp_path / "wb")
    tracker.log_results(RunSummary.of(df))
    tracker.close()
    logged = next((tmp_path / "wb").rglob("across_nodes_*.table.json"))
    table = json.loads(logged.read_text())
    logged_row = dict(zip(table["columns"], table["data"][0]))
    assert table["columns"][:3] == ["model", "problem", "layout"] and [logged_row[c] for c in (
        "model", "problem", "layout", "ref one node (us)", "ref across nodes (us)", "across / one node",
        "across / one node_lo", "across / one node_hi")] == ["strong", "all_reduce", "2x1", 40.0, 100.0, 2.5, 2.5, 2.5]


def test_wandb_gets_the_runs_scores_and_each_models(run_dir, tmp_path):
    """Two models in one run: before, the summary had no pass@1 and one fast_1.0@1 (the last model's)."""
    import wandb_files
    from pkb_ray.results.metrics import summarize
    from pkb_ray.results.parquet import read_results
    from pkb_ray.spec.config import WandbConfig
    from pkb_ray.summary.tracking import Tracker

    df = read_results(run_dir / "results")
    tracker = Tracker(WandbConfig(mode="offline"), {}, tmp_path / "wb")
    tracker.log_results(RunSummary.of(df))
    tracker.close()
    summary = wandb_files.summary(next((tmp_path / "wb").rglob("run-*.wandb")))
    per_model = summarize(df, ["model"], ks=(1, 5)).set_index("model")
    for model in ("strong", "weak"):
        assert summary[f"{model}/pass@1"] == pytest.approx(per_model.loc[model, "pass@1"])
        assert summary[f"{model}/fast_1.0@1"] == pytest.approx(per_model.loc[model, "fast_1.0@1"])
    # the run's own: the mean over all six (model, problem) units, not one model's
    units = summarize(df, ["model", "problem_id"], ks=(1,))
    assert summary["pass@1"] == pytest.approx(units["pass@1"].mean()) and summary["problems"] == 6
    assert summary["pass@5_problems"] == 0 and summary["pass@1_problems"] == 6  # 4 samples per problem


def test_a_size_sweep_is_drawn_against_bytes_with_each_models_crossover(tmp_path):
    from pkb_ray.summary import sizes as size_sweeps

    # one sample per model at four sizes, timed both ways: "fast" beats the reference up to 64 KiB
    # (graph replays), then stops; "slow" never does
    speedups = {"fast": [3.0, 2.0, 1.2, 0.9, 0.7], "slow": [0.5, 0.5, 0.6, 0.6, 0.5]}
    rows = []
    for model, curve in speedups.items():
        s = Sample(problem_id="all_reduce", model=model, sample_index=0, source=f"# {model}\n")
        for n, sp in enumerate(curve):
            numel = 1024 << (2 * n)
            ref = 10.0 + numel / 1000
            rows.append(Result.for_sample(s, Status.CORRECT, world_size=2, hardware="h200_2", category="collective",
                                          size=f"numel={numel}", message_bytes=4 * numel, timing_mode="graph",
                                          ref_time_us=ref, cand_time_us=ref / sp, speedup=sp,
                                          graph_ref_time_us=ref, graph_cand_time_us=ref / sp,
                                          eager_ref_time_us=ref + 30, eager_cand_time_us=ref / sp + 9))
    write_results(rows, tmp_path / "run" / "results")
    df = read_runs([tmp_path / "run"])
    page, md = write(df, tmp_path / "out")
    html, text = page.read_text(), md.read_text()
    assert '<section id="sizes">' in html and 'id="size-all_reduce-w2"' in html and "## Against message size" in text
    assert "times: graph replays" in html
    sweep = size_sweeps.table(df.assign(base_problem=df["problem_id"]))
    fast = sweep[sweep["model"] == "fast"]
    assert list(fast["bytes"]) == [4096, 16384, 65536, 262144, 1048576]
    assert list(fast["beats reference"]) == ["yes", "yes", "yes", "no", "no"]
    assert size_sweeps.crossover(fast) == 262144 and size_sweeps.crossover(sweep[sweep["model"] == "slow"]) is None
    assert fast["eager reference us"].iloc[0] == pytest.approx(fast["graph reference us"].iloc[0] + 30)
    # each size scores as a problem of its own: 5 sizes x 1 problem
    assert "5 problem(s)" in html


def test_the_printed_table_wandb_and_the_report_agree_on_every_figure(run_dir, tmp_path):
    """One run's three views render one RunSummary: per model and per problem, the printed table,
    W&B (a real offline run, read back) and report.md show the same figures and intervals."""
    import json
    import re

    import wandb_files
    from pkb_ray.spec.config import WandbConfig
    from pkb_ray.summary import render_text
    from pkb_ray.summary.sections import with_interval
    from pkb_ray.summary.tracking import Tracker

    summary = RunSummary.of(read_runs([run_dir]))
    text = render_text.table(summary)
    assert max(map(len, text.splitlines())) <= render_text.WIDTH
    table_lines = text.split("\nstatuses:")[0].splitlines()[1:]
    printed = {tuple(cells[:2]): cells for cells in (re.split(r" {2,}", line.strip()) for line in table_lines)}
    tracker = Tracker(WandbConfig(mode="offline"), {}, tmp_path / "wb")
    tracker.log_results(summary)
    tracker.close()
    logged = wandb_files.summary(next((tmp_path / "wb").rglob("run-*.wandb")))
    table = json.loads(next((tmp_path / "wb").rglob("per_problem_*.table.json")).read_text())
    per_problem = {(r[0], r[1]): dict(zip(table["columns"], r)) for r in table["data"]}
    md = write_pages(summary, tmp_path / "out")[1].read_text()
    board = {c[2]: c for c in (line.split("|") for line in md.split("## Leaderboard")[1].split("##")[0].splitlines())
             if len(c) > 9 and c[1].strip().isdigit()}
    problems = {(c[3].strip(), c[1].strip()): c for c in (line.split("|") for line in
                md.split("## Per problem")[1].split("##")[0].splitlines()) if len(c) > 6}
    two = lambda x: f"{x:.2f}"  # noqa: E731  the printed table's digits
    for model in ("strong", "weak"):
        w = lambda key: logged[f"{model}/{key}"]  # noqa: E731
        # printed: model problem n pass@1 pass@5 over fast_1.0@1 [95%] median speedup [95%]
        n, pass1, _, _, fast, median = printed[(model, "ALL")][2:8]
        assert (int(n), pass1, fast, median) == (
            w("n"), with_interval(w("pass@1"), w("pass@1_lo"), w("pass@1_hi"), two),
            with_interval(w("fast_1.0@1"), w("fast_1.0@1_lo"), w("fast_1.0@1_hi"), two),
            with_interval(w("median_speedup"), w("median_speedup_lo"), w("median_speedup_hi"), two))
        cells = [c.strip() for c in board[f" {model} "]]
        assert cells[4:10] == [str(w("n"))] + [
            with_interval(w(k), w(f"{k}_lo"), w(f"{k}_hi"))
            for k in ("pass@1", "fast_1.0@1", "fast_1.5@1", "geomean_speedup", "median_sol_fraction")]
        for problem in ("all_reduce", "all_gather", "gemm_rs"):
            wb = per_problem[(model, problem)]
            bounds = (wb["pass@1"], wb["pass@1_lo"], wb["pass@1_hi"])
            assert printed[(model, problem)][3] == with_interval(*bounds, two)
            assert problems[(model, problem)][5].strip() == with_interval(*bounds)


def test_a_large_runs_wandb_page_is_the_light_one_and_its_sources_are_in_the_samples_table(tmp_path):
    """600 samples of 3-8 KB (above the report's inline limit): W&B gets report.html without the
    samples' blocks (before, up to 3,000 sources inline), each problem's blocks as a panel of its
    own that the page names (a link to sources/ cannot resolve in W&B), and every source in its
    samples table."""
    from benchmarks import report_size as bench
    from pkb_ray.spec.config import WandbConfig
    from pkb_ray.summary.publish import publish
    from pkb_ray.summary.tracking import Tracker

    rows = bench.synthetic_results(600)
    write_results(rows, tmp_path / "run" / "results")
    summary, panels = publish(tmp_path / "run" / "results", tmp_path / "out", "large")
    problems = summary.rows["problem_id"].nunique()
    on_disk = (tmp_path / "out" / "report.html").read_text()
    assert "href='sources/" in on_disk.replace('"', "'") and "<pre class='src'>" not in on_disk
    assert len(list((tmp_path / "out" / "sources").glob("*.html"))) == problems == len(panels) - 1
    page = panels["report.html"]
    assert "<pre class='src'>" not in page and "sources/" not in page.replace("report_sources/", "")
    tracker = Tracker(WandbConfig(mode="offline"), {}, tmp_path / "wb")
    tracker.log_results(summary, panels)
    tracker.close()
    logged = next((tmp_path / "wb").rglob("report_*.html"))
    assert logged.stat().st_size < 1_000_000 and "<details id=" not in logged.read_text()
    sources = list((tmp_path / "wb").rglob("report_sources/*.html"))
    assert len(sources) == problems and all("<details id=" in p.read_text() for p in sources)
    for pid in summary.rows["problem_id"].unique():
        assert f"report_sources/{pid}" in page  # the page names each problem's panel
    samples = json.loads(next((tmp_path / "wb").rglob("samples_*.table.json")).read_text())
    column = samples["columns"].index("source")
    assert sorted(r[column] for r in samples["data"]) == sorted(r.source for r in rows)
