"""Issue 66, as a new user read a run: a figure without an interval says n/a (compare's changes
drawn from one sample too), every pass@k says over how many problems (summary.json, report.md,
report.html, compare), compare says why its n is less than the summary's, the counts and the ETA
are this run's."""

import json
import math
import re
import time

import pytest

from pkb_ray.pipeline.telemetry import RunMetrics
from pkb_ray.spec.names import Status
from pkb_ray.spec.schema import Result, Sample, results_to_table
from pkb_ray.summary import RunSummary, render_html, render_json, render_markdown, render_text, stored
from pkb_ray.summary.compare import compare
from pkb_ray.summary.render_compare import markdown, text
from pkb_ray.sweep import sample_count

OK, WRONG, NOT_RUN = Status.CORRECT, Status.WRONG_OUTPUT, Status.UNSUPPORTED_HARDWARE


def run(spec: dict[str, list[tuple[Status, float | None]]], generation: int = 0) -> RunSummary:
    """A run of model ``m``: per problem, each sample's status and speedup; runs of one
    ``generation`` hold the same sources."""
    rows = []
    for pid, samples in spec.items():
        for i, (status, speedup) in enumerate(samples):
            s = Sample(problem_id=pid, model="m", sample_index=i, source=f"# {pid} {i} {generation}\n")
            rows.append(Result.for_sample(s, status, "", world_size=2, hardware="h200_2", category="collective",
                                          speedup=speedup, sol_fraction=speedup and speedup / 10))
    df = results_to_table(rows).to_pandas()
    return RunSummary.of(df.assign(nodes=df["nodes"].fillna(1).astype(int), round=df["round"].fillna(0).astype(int)))


def replay_like(scale: float = 1.0, generation: int = 0) -> RunSummary:
    """One problem with a single sample, one with three (two timed), one with a sample the hardware
    could not run (as the shipped set's all_reduce has); ``scale`` slows its samples unevenly."""
    return run({"all_gather": [(OK, 1.2 * scale)],
                "all_reduce": [(OK, 1.1 * scale), (WRONG, None), (OK, 0.9 * scale ** 2)],
                "broadcast": [(NOT_RUN, None), (OK, 1.0 * scale), (OK, 1.3 * scale ** 2)]}, generation)


@pytest.mark.parametrize("generation,test", [(0, "paired"), (1, "unpaired")])
def test_a_change_drawn_from_one_sample_has_no_interval_and_says_n_a(generation, test):
    c = compare(replay_like(), replay_like(0.8, generation))
    rows = c.table.set_index("problem")
    assert set(rows["test"]) == {test}
    one = rows.loc["all_gather"]  # one sample a side: resampling it would give a zero-width interval
    for column in ("Δ pass@1", "Δ fast_1.0@1", "speedup B/A"):
        assert math.isnan(one[f"{column}_lo"]) and math.isnan(one[f"{column}_hi"]) and not math.isnan(one[column])
    for problem in ("all_reduce", "broadcast", "ALL"):  # two samples or more a side: an interval
        assert rows.loc[problem, "speedup B/A_lo"] < rows.loc[problem, "speedup B/A_hi"], problem
    line = next(x for x in text(c).splitlines() if " all_gather " in x)
    assert line.count("[n/a]") == 3 and "0.80 [n/a]" in line, text(c)
    assert "[n/a]" in markdown(c, "A", "B") and one["regressed"] == ""


def test_compare_says_why_its_n_is_less_than_the_summarys_and_over_how_many_problems():
    a = replay_like()
    c = compare(a, replay_like(0.8))
    rows = c.table.set_index("problem")
    assert (rows.loc["broadcast", ["n A", "n B", "not run A", "not run B"]] == [2, 2, 1, 1]).all()
    assert (rows.loc["ALL", ["problems", "n A", "not run A"]] == [3, 6, 1]).all()
    assert int(a.overall["n"].iloc[0]) == 7  # the summary counts the sample that was never run
    shown = text(c)
    assert "never run (unsupported_hardware), A/B: broadcast 1/1" in " ".join(shown.split())
    assert "ALL (3 problems)" in shown and "6/6" in shown
    assert "| not run A |" in markdown(c, "A", "B")


def test_every_pass_at_k_says_over_how_many_problems():
    many = [(OK if i % 2 else WRONG, 1.1 if i % 2 else None) for i in range(10)]
    s = run({"all_reduce": many, "all_gather": [(OK, 1.2), (WRONG, None)], "broadcast": [(OK, 0.9), (OK, 1.4)]})
    assert s.scalars["pass@10_problems"] == 1 and isinstance(s.scalars["pass@10_problems"], int)
    assert s.scalars["problems"] == 3 and s.scalars["fast_1.0@10_problems"] == 1
    over = render_json.document(s, "t")["over"]
    assert over["pass@1"] == "3 of 3 problems" and over["m/pass@1"] == "3 of 3 problems"
    assert over["pass@10"] == over["fast_1.0@10"] == "1 of 3 problems (those with at least 10 samples)"
    assert over["m/pass@5"] == "1 of 3 problems (those with at least 5 samples)"
    json.dumps(render_json.document(s, "t"))  # plain JSON
    # report.md and report.html: the pass@k table has the problems each point averages
    assert list(s.curve_table["problems"]) == [3, 3]  # k runs to the fewest samples: every point the same 3
    md = render_markdown.page(s, "t", "now")
    assert "| model | k | pass@k | fast_1.0@k | problems |" in md
    page = render_html.page(s, "t", "now")
    assert page.count("<th>problems</th>") >= 2  # the leaderboard's, and the pass@k table's
    # the printed table: pass@5 over 1 of the 3 problems
    assert text_cell(s, "ALL", "pass@5 over") == "1/3"


def test_a_pass_at_k_no_problem_has_enough_samples_for_says_so():
    s = run({"all_reduce": [(OK, 1.1), (WRONG, None)], "all_gather": [(OK, 1.2), (OK, 1.0)]})
    over = s.over
    assert over["pass@10"] == "0 of 2 problems: none has 10 samples" and "pass@10" not in s.scalars


def test_a_stored_comparison_says_n_a_and_over_how_many_problems():
    change = stored.Change("m", "geomean_speedup", 1.1, (math.nan, math.nan), 1.0, (0.8, 1.2), False, (3, 2))
    line = stored.text([change]).splitlines()[-1]
    assert "1.1 [n/a]" in line and "1 [0.8, 1.2]" in line and " 3/2 " in line
    doc = render_json.document(replay_like(), "t")
    assert stored.compare(doc, doc, 0.05, 0.1)[0].problems == (3, 3)


def test_the_summary_table_is_the_printed_one():
    s = replay_like()
    assert list(s.table["problem_id"]) == ["all_gather", "all_reduce", "broadcast", "ALL"]
    assert list(s.table["n"]) == [1, 3, 3, 7]
    assert text_cell(s, "broadcast", "n") == "3"


def test_the_run_counts_the_problems_its_samples_are_of():
    rows = [{"problem_id": p} for p in ("all_reduce", "all_reduce", "broadcast")]
    assert sample_count(rows, {"all_reduce": 0, "broadcast": 0}) == "3 samples of 2 problems"
    assert sample_count(rows, {f"p{i}": 0 for i in range(59)} | {"all_reduce": 0, "broadcast": 0}) == (
        "3 samples of 2 problems (59 of the 61 problems chosen have no samples)")


def test_the_eta_comes_only_from_a_measured_rate():
    m = RunMetrics()
    m.total = 10
    m.result(Status.COMPILE_ERROR.value, 2, 0.0)  # settled before any rank ran: says nothing of the rate
    assert m.eta_s() is None and "ETA" not in m.describe()
    m.result(Status.CORRECT.value, 2, 2.0, evaluated=True)  # a gang's first: 1 result in 2 s
    now = time.monotonic()
    assert m.eta_s(now) == pytest.approx(8 * 2.0, rel=0.05)  # 8 left at 1 per 2 s
    assert m.eta_s(now + 2.0) == pytest.approx(8 * 4.0, rel=0.05)  # no second result in 4 s: slower
    m.result(Status.CORRECT.value, 2, 0.0)  # a copy: no time of its own, one fewer left
    assert m.eta_s(now) == pytest.approx(7 * 2.0, rel=0.05) and "ETA" in m.describe(now)
    for _ in range(7):
        m.result(Status.CORRECT.value, 2, 1.0, evaluated=True)
    assert m.eta_s() is None  # nothing left


def text_cell(s: RunSummary, problem: str, column: str) -> str:
    """A cell of the printed table, by its row's problem and its column's header (no cell holds two
    spaces in a row: render_text.GAP)."""
    header, *rows = [re.split(r" {2,}", line.strip()) for line in render_text.table(s).splitlines()]
    row = next(r for r in rows if len(r) == len(header) and r[1] == problem)
    return row[header.index(column)]
