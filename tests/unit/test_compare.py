"""pkb_ray.summary.compare on two runs' result frames built as real rows (pkb_ray.schema): runs drawn
from one distribution flag nothing; lost correct samples or halved speedups are flagged."""

import random

import pandas as pd

from pkb_ray.names import Status
from pkb_ray.schema import Result, Sample, results_to_table
from pkb_ray.summary import RunSummary
from pkb_ray.summary.compare import compare
from pkb_ray.summary.render_compare import text

PROBLEMS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")


def run(seed: int, p_correct: float = 0.7, speed: float = 1.3, samples: int = 12, model: str = "m") -> RunSummary:
    """One model's run: each sample correct with chance ``p_correct``, at a speedup around ``speed``."""
    rng, rows = random.Random(seed), []
    for pid in PROBLEMS:
        for i in range(samples):
            ok = rng.random() < p_correct
            s = Sample(problem_id=pid, model=model, sample_index=i, source=f"# {pid} {i}\n")
            speedup = speed * rng.lognormvariate(0, 0.2) if ok else None
            rows.append(Result.for_sample(s, Status.CORRECT if ok else Status.WRONG_OUTPUT, "", world_size=2,
                                          hardware="h200_2", category="collective", speedup=speedup,
                                          sol_fraction=speedup and speedup / 10))
    df = results_to_table(rows).to_pandas()
    return RunSummary.of(df.assign(nodes=df["nodes"].fillna(1).astype(int), round=df["round"].fillna(0).astype(int)))


def test_runs_of_one_distribution_flag_nothing():
    for seed in (1, 2, 3):
        c = compare(run(seed), run(seed + 10))
        assert len(c.table) == len(PROBLEMS) + 1 and c.regressions.empty, text(c)
        assert set(c.table["problem"]) == {*PROBLEMS, "ALL"} and not c.only_a and not c.only_b
        every = c.table.iloc[-1]
        assert every["Δ pass@1_lo"] <= every["Δ pass@1"] <= every["Δ pass@1_hi"]


def test_lost_correct_samples_are_a_pass_rate_regression():
    c = compare(run(1), run(2, p_correct=0.15))
    every = c.table.set_index("problem").loc["ALL"]
    assert "pass@1" in every["regressed"].split() and every["Δ pass@1_hi"] < 0
    assert every["p pass@1"] < 0.01


def test_halved_speedups_are_a_speedup_regression_and_not_a_pass_rate_one():
    c = compare(run(1), run(2, speed=0.65))
    every = c.table.set_index("problem").loc["ALL"]
    assert "speedup" in every["regressed"].split() and every["speedup B/A_hi"] < 1
    assert 0.4 < every["speedup B/A"] < 0.6
    assert all("pass@1" not in r.split() for r in c.table["regressed"])


def test_one_correct_sample_a_side_is_never_significant():
    a = run(1, p_correct=1.0, samples=1)
    b = run(2, p_correct=1.0, samples=1, speed=0.2)
    c = compare(a, b)
    p = c.table.set_index("problem")["p speedup"]
    assert c.regressions.empty and (p.drop("ALL") > 0.4).all()  # 1 + 1 shuffled: either order, p = 1/2
    assert p["ALL"] > 1 / 16 - 0.01  # 4 such problems: at best 1/2^4, never below 0.05


def test_two_single_model_runs_compare_their_models_and_list_unshared_problems():
    a, b = run(1, model="old"), run(2, model="new")
    c = compare(a, b)
    assert set(c.table["model"]) == {"old -> new"}
    rows = b.rows[b.rows["problem_id"] != "broadcast"]
    c = compare(a, RunSummary.of(rows))
    assert c.only_a == ["old -> new / broadcast"] and "broadcast" not in set(c.table["problem"])
    assert all(len(line) <= 120 for line in text(c).splitlines())
