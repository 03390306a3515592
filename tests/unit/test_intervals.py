"""Standard errors of pass@k and bootstrap intervals (pkb_ray.metrics, pkb_ray.intervals): hand
values, and the properties an interval must have."""

import math
import random

import numpy as np
import pandas as pd
import pytest

from pkb_ray import intervals
from pkb_ray.metrics import pass_at_k_variance, pass_se, summarize


def _rows(problems: dict[str, list[tuple[str, float | None]]], model: str = "m") -> pd.DataFrame:
    return pd.DataFrame([dict(model=model, problem_id=pid, category="c", status=status, speedup=speedup,
                              sol_fraction=speedup and speedup / 10)
                         for pid, samples in problems.items() for status, speedup in samples])


def test_pass_at_1_variance_is_the_unbiased_binomial_one():
    assert pass_at_k_variance(4, 3, 1) == pytest.approx(0.75 * 0.25 / 3)
    assert pass_at_k_variance(10, 0, 1) == 0.0 and pass_at_k_variance(10, 10, 1) == 0.0


def test_pass_at_k_variance_is_the_jackknife_by_hand():
    # n=3, c=1, k=2: without the correct sample pass@2 = 0, without either wrong one 1;
    # (n-1)/n * sum of squares about 2/3 = 2/3 * (4/9 + 1/9 + 1/9) = 4/9
    assert pass_at_k_variance(3, 1, 2) == pytest.approx(4 / 9)
    assert math.isnan(pass_at_k_variance(2, 1, 2))  # one draw of k: nothing to estimate from
    with pytest.raises(ValueError):
        pass_at_k_variance(2, 3, 1)


def test_summarized_se_combines_the_problems_variances():
    rows = _rows({"p1": [("correct", 1.0)] * 3 + [("wrong_output", None)],
                  "p2": [("correct", 2.0), ("timeout", None), ("crash", None)]})
    row = summarize(rows, ["model"], ks=(1, 3)).iloc[0]
    # sqrt(3/4 * 1/4 / 3 + 1/3 * 2/3 / 2) / 2 = sqrt(25/144) / 2
    assert row["pass@1_se"] == pytest.approx(5 / 24)
    assert pass_se([0.0625, 1 / 9]) == pytest.approx(5 / 24)
    assert math.isnan(row["pass@3_se"])  # p2 has exactly 3 samples


def test_bootstrap_interval_holds_the_estimate_and_is_deterministic():
    rng = random.Random(1)
    rows = _rows({f"p{i}": [("correct", rng.lognormvariate(0, 0.5)) if rng.random() < 0.6 else ("crash", None)
                            for _ in range(8)] for i in range(6)})
    a, b = summarize(rows, ["model"]).iloc[0], summarize(rows, ["model"]).iloc[0]
    for name in ("fast_1.0@1", "geomean_speedup", "median_speedup", "median_sol_fraction"):
        assert a[f"{name}_lo"] <= a[name] <= a[f"{name}_hi"] and a[f"{name}_lo"] < a[f"{name}_hi"], name
        assert (a[f"{name}_lo"], a[f"{name}_hi"]) == (b[f"{name}_lo"], b[f"{name}_hi"])  # seeded


def test_bootstrap_interval_shrinks_with_more_samples():
    def width(n: int) -> tuple[float, float]:
        rng = random.Random(2)
        row = summarize(_rows({"p": [("correct", rng.lognormvariate(0, 0.5)) if i % 2 else ("crash", None)
                                     for i in range(n)]}), ["model"]).iloc[0]
        return (row["geomean_speedup_hi"] - row["geomean_speedup_lo"], row["fast_1.0@1_hi"] - row["fast_1.0@1_lo"])

    small, large = width(20), width(800)
    assert large[0] < small[0] / 3 and large[1] < small[1] / 3  # ~ 1/sqrt(n): 40x the samples, ~1/6 the width


def test_equal_speedups_give_a_zero_width_interval():
    row = summarize(_rows({"p1": [("correct", 1.5)] * 5, "p2": [("correct", 1.5)] * 3}), ["model"]).iloc[0]
    for name in ("geomean_speedup", "median_speedup", "fast_1.0@1"):
        assert row[f"{name}_lo"] == pytest.approx(row[name], abs=1e-12)
        assert row[f"{name}_hi"] == pytest.approx(row[name], abs=1e-12)
    assert row["pass@1_se"] == 0.0


def test_resamples_stay_within_their_problem():
    r = intervals.resample([3, 2])
    assert r.index.shape == (intervals.RESAMPLES, 5)
    assert r.index[:, :3].max() <= 2 and r.index[:, 3:].min() >= 3  # problem 1 draws from 0..2, problem 2 from 3..4
    assert r.weight.sum() == pytest.approx(1.0)
    # a share over the draws is the mean over problems of each one's share: 1/2 * (1/3) + 1/2 * 1 on average
    assert intervals.share(r, np.array([1, 0, 0, 1, 1])).mean() == pytest.approx(2 / 3, abs=0.02)
    assert all(map(math.isnan, intervals.interval(np.array([np.nan, np.nan])))) and intervals.interval([1.0]) == (1.0, 1.0)
