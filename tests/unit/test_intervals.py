"""Standard errors of pass@k, Wilson and bootstrap intervals (pkb_ray.results.metrics, pkb_ray.results.intervals):
hand values, and the properties an interval must have."""

import math
import random

import numpy as np
import pandas as pd
import pytest

from pkb_ray.results import intervals
from pkb_ray.results.metrics import pass_at_k_variance, pass_se, rate_interval, summarize


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


def test_equal_speedups_give_a_zero_width_interval_but_rates_never_do():
    row = summarize(_rows({"p1": [("correct", 1.5)] * 5, "p2": [("correct", 1.5)] * 3}), ["model"]).iloc[0]
    for name in ("geomean_speedup", "median_speedup"):
        assert row[f"{name}_lo"] == pytest.approx(row[name], abs=1e-12)
        assert row[f"{name}_hi"] == pytest.approx(row[name], abs=1e-12)
    assert row["pass@1_se"] == 0.0
    # every sample correct (and faster): hi = 1, and lo the binomial's of 8 samples, not 1
    for name in ("pass@1", "fast_1.0@1"):
        assert row[name] == row[f"{name}_hi"] == 1.0 and row[f"{name}_lo"] == pytest.approx(intervals.wilson(1.0, 8)[0])
        assert row[f"{name}_lo"] < 0.7


# ---------------------------------------------------------------- Wilson intervals of the rates


def test_wilson_interval_by_hand():
    assert intervals.wilson(0.5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    lo, hi = intervals.wilson(0.0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)
    assert intervals.wilson(1.0, 10) == pytest.approx((0.7225, 1.0), abs=1e-4) and intervals.wilson(1.0, 10)[1] == 1.0
    assert intervals.wilson(0.2, 100, z=1.0)[0] < 0.2 < intervals.wilson(0.2, 100, z=1.0)[1]
    for p, n in ((math.nan, 10), (0.5, 0), (0.5, math.nan)):
        assert all(map(math.isnan, intervals.wilson(p, n))), (p, n)


def test_effective_sample_size_is_kishs_capped_at_the_samples():
    assert intervals.effective_n(0.5, 0.1, 100) == pytest.approx(25)  # 0.25 / 0.01
    assert intervals.effective_n(0.5, 0.01, 100) == 100  # 2500 trials' worth: capped at the samples
    for p, se in ((0.5, 0.0), (0.5, math.nan), (0.0, 0.1), (1.0, 0.1)):
        assert intervals.effective_n(p, se, 12) == 12, (p, se)  # the SE says nothing: a binomial over all


def test_a_rate_interval_widens_with_the_standard_error_and_is_nan_without_problems():
    # two problems of 10, 3 and 7 correct: se^2 = (0.21 + 0.21) / 9 / 4, n_eff = 0.25 / se^2 = 21.4 of 20: capped
    var = pass_at_k_variance(10, 3, 1)
    assert rate_interval([0.3, 0.7], [var, var], 20) == pytest.approx(intervals.wilson(0.5, 20))
    # one problem of 2 samples, 1 correct: se = 0.5, n_eff = 1 (not 2): wider than a binomial over 2
    lo, hi = rate_interval([0.5], [pass_at_k_variance(2, 1, 1)], 2)
    two = intervals.wilson(0.5, 2)
    assert (lo, hi) == pytest.approx(intervals.wilson(0.5, 1)) and hi - lo > two[1] - two[0]
    assert all(map(math.isnan, rate_interval([], [], 0)))


def test_summarized_rates_have_wilson_intervals():
    one = summarize(_rows({"p": [("correct", 2.0)]}), ["model"], ks=(1, 2)).iloc[0]
    assert one["pass@1"] == one["pass@1_hi"] == 1.0 and one["pass@1_lo"] < 0.25  # one correct sample: wide
    assert math.isnan(one["pass@1_se"]) and math.isnan(one["pass@2_lo"]) and math.isnan(one["pass@2_hi"])
    none = summarize(_rows({"p1": [("crash", None)] * 4, "p2": [("correct", 0.5)] * 6}), ["model"], ks=(1, 2)).iloc[0]
    for p in (1.0, 2.0):  # no sample faster: lo = 0 and hi > 0, the binomial's of the 10 samples
        assert none[f"fast_{p}@1"] == none[f"fast_{p}@1_lo"] == 0.0
        assert none[f"fast_{p}@1_hi"] == pytest.approx(intervals.wilson(0.0, 10)[1])
    assert (none["pass@1_lo"], none["pass@1_hi"]) == pytest.approx(intervals.wilson(0.5, 10))  # se 0: all 10
    # pass@2 over draws of 2: p1 fails every draw, p2 passes every one: se 0, n_eff = 10 / 2
    assert (none["pass@2_lo"], none["pass@2_hi"]) == pytest.approx(intervals.wilson(0.5, 5))
    rows = _rows({"p1": [("correct", 1.0)] * 3 + [("wrong_output", None)],
                  "p2": [("correct", 2.0), ("timeout", None), ("crash", None)]})
    row = summarize(rows, ["model"], ks=(1,)).iloc[0]  # p = 13/24, se = 5/24: n_eff = p (1 - p) / se^2 = 5.72 of 7
    assert (row["pass@1_lo"], row["pass@1_hi"]) == pytest.approx(intervals.wilson(13 / 24, 143 / 25))


def test_resamples_stay_within_their_problem():
    r = intervals.resample([3, 2])
    assert r.index.shape == (intervals.RESAMPLES, 5)
    assert r.index[:, :3].max() <= 2 and r.index[:, 3:].min() >= 3  # problem 1 draws from 0..2, problem 2 from 3..4
    assert r.weight.sum() == pytest.approx(1.0)
    # a share over the draws is the mean over problems of each one's share: 1/2 * (1/3) + 1/2 * 1 on average
    assert intervals.share(r, np.array([1, 0, 0, 1, 1])).mean() == pytest.approx(2 / 3, abs=0.02)
    assert all(map(math.isnan, intervals.interval(np.array([np.nan, np.nan])))) and intervals.interval([1.0]) == (1.0, 1.0)


# ---------------------------------------------------------------- the curves' bands and standard errors


def _random_rows(problems: int, per_problem: int, seed: int, share: float = 0.6) -> pd.DataFrame:
    rng = random.Random(seed)
    return _rows({f"p{i}": [("correct", rng.lognormvariate(0, 0.5)) if rng.random() < share else ("crash", None)
                            for _ in range(per_problem)] for i in range(problems)})


def test_counts_are_each_problems_successes_in_each_draw():
    r = intervals.resample([3, 2], resamples=50)
    success = np.array([1, 0, 1, 0, 1], dtype=bool)
    c = intervals.counts(r, success)
    assert c.shape == (50, 2)
    assert (c[:, 0] == success[r.index[:, :3]].sum(axis=1)).all()
    assert (c[:, 1] == success[r.index[:, 3:]].sum(axis=1)).all()
    assert c[:, 0].max() <= 3 and c[:, 1].max() <= 2


def test_every_curve_point_has_a_band_holding_it_and_the_first_fast_one_is_fast_p_at_1s():
    from pkb_ray.results.metrics import curves

    rows = _random_rows(6, 8, seed=4)
    c, again = curves(rows, ["model"], ps=(1.0,)), curves(rows, ["model"], ps=(1.0,))
    assert list(c["k"].unique()) == list(range(1, 9)) and set(c["metric"]) == {"pass", "fast_1.0"}
    assert (c["lo"] <= c["value"] + 1e-12).all() and (c["value"] <= c["hi"] + 1e-12).all()
    assert (c[c["k"] <= 3]["hi"] - c[c["k"] <= 3]["lo"] > 0.05).all()  # a real band where the estimate is not at 1
    assert c[["lo", "hi"]].equals(again[["lo", "hi"]])  # seeded
    # k = 1: summarize's fast_1.0@1, with the bootstrap's band (the tables have its Wilson interval)
    s, first = summarize(rows, ["model"]).iloc[0], c[(c["k"] == 1) & (c["metric"] == "fast_1.0")].iloc[0]
    assert first["value"] == pytest.approx(s["fast_1.0@1"])
    draws = intervals.share(intervals.resample([8] * 6), (rows["status"] == "correct") & (rows["speedup"] > 1.0))
    assert (first["lo"], first["hi"]) == pytest.approx(intervals.interval(draws))
    assert c[(c["k"] == 1) & (c["metric"] == "pass")].iloc[0]["se"] == pytest.approx(s["pass@1_se"])


def test_the_bands_shrink_with_more_samples():
    from pkb_ray.results.metrics import curves, fast_p_curve

    def widths(n: int) -> tuple[float, ...]:
        rows = _random_rows(3, n, seed=5, share=0.3)
        c = curves(rows, ["model"], ps=(1.0,), max_k=2).set_index(["metric", "k"])
        t = fast_p_curve(rows, ["model"], ps=(0.5, 1.0)).set_index("p")
        return (*(c.loc[(m, k), "hi"] - c.loc[(m, k), "lo"] for m in ("pass", "fast_1.0") for k in (1, 2)),
                *(t.loc[p, "hi"] - t.loc[p, "lo"] for p in (0.5, 1.0)))

    small, large = widths(20), widths(800)
    assert all(w > 0 for w in large)
    assert all(lg < sm / 3 for sm, lg in zip(small, large)), (small, large)  # ~ 1/sqrt(n): 40x, ~1/6


def test_fast_p_at_k_standard_error_is_pass_at_ks_with_fast_as_success():
    from pkb_ray.results.metrics import curves, pass_at_k_variance

    # p1: 4 samples, 2 correct and faster than 1x (3.0, 1.5), one correct and slower, one crash;
    # p2: 3 samples, 1 faster. fast_1.0@2 per problem: 1 - C(2,2)/C(4,2) = 5/6 and 1 - C(2,2)/C(3,2) = 2/3
    rows = _rows({"p1": [("correct", 3.0), ("correct", 1.5), ("correct", 0.5), ("crash", None)],
                  "p2": [("correct", 2.0), ("wrong_output", None), ("correct", 0.9)]})
    c = curves(rows, ["model"], ps=(1.0,)).set_index(["metric", "k"])
    assert c.loc[("fast_1.0", 2), "value"] == pytest.approx((5 / 6 + 2 / 3) / 2)
    se = math.sqrt(pass_at_k_variance(4, 2, 2) + pass_at_k_variance(3, 1, 2)) / 2
    assert c.loc[("fast_1.0", 2), "se"] == pytest.approx(se) and se > 0
    # p2 has exactly 3 samples: at k = 3 there is no variance to estimate (as pass@3_se)
    assert math.isnan(c.loc[("fast_1.0", 3), "se"]) and math.isnan(c.loc[("pass", 3), "se"])
    pass3 = summarize(rows, ["model"], ks=(3,)).iloc[0]
    assert math.isnan(pass3["pass@3_se"])
    assert c.loc[("pass", 2), "se"] == pytest.approx(summarize(rows, ["model"], ks=(2,)).iloc[0]["pass@2_se"])


def test_fast_p_against_p_is_summarizes_fast_p_at_1_with_its_interval():
    from pkb_ray.results.metrics import CURVE_THRESHOLDS, FAST_P_THRESHOLDS, fast_col, fast_p_curve

    rows = pd.concat([_random_rows(5, 10, seed=6), _random_rows(4, 7, seed=7).assign(model="n")])
    t = fast_p_curve(rows, ["model"])
    assert len(t) == 2 * len(CURVE_THRESHOLDS) and set(FAST_P_THRESHOLDS) <= set(CURVE_THRESHOLDS)
    s = summarize(rows, ["model"]).set_index("model")
    for p in FAST_P_THRESHOLDS:
        at = t[t["p"] == p].set_index("model")
        for column, end in (("value", ""), ("lo", "_lo"), ("hi", "_hi")):
            assert np.allclose(at[column], s.loc[at.index, f"{fast_col(p)}{end}"], atol=1e-12), (p, column)
    assert (t["lo"] <= t["value"] + 1e-12).all() and (t["value"] <= t["hi"] + 1e-12).all()
    for _, g in t.groupby("model"):
        assert (np.diff(g["value"]) <= 1e-12).all()  # never rises with p


def test_a_model_the_hardware_refused_entirely_has_no_figures_and_breaks_nothing():
    from pkb_ray.results.metrics import curves, fast_p_curve

    rows = pd.concat([_random_rows(2, 4, seed=8),
                      _rows({"p0": [("unsupported_hardware", None)] * 3}, model="refused")])
    s = summarize(rows, ["model"]).set_index("model").loc["refused"]  # before: IndexError in intervals.median
    assert s["problems"] == 0 and s["n_unsupported_hardware"] == 3
    assert all(math.isnan(s[c]) for c in ("pass@1", "median_speedup", "median_speedup_lo", "geomean_speedup_hi"))
    assert set(curves(rows)["model"]) == set(fast_p_curve(rows)["model"]) == {"m"}


def test_the_share_of_correct_samples_faster_than_the_reference_has_a_bootstrap_interval():
    # p1: 3 correct (2 faster), p2: 2 correct (1 faster) and a wrong one; pooled 3/5 correct, timed, faster
    rows = _rows({"p1": [("correct", 2.0), ("correct", 1.5), ("correct", 0.5), ("wrong_output", None)],
                  "p2": [("correct", 1.2), ("correct", 0.8), ("wrong_output", 9.0)]})
    s = summarize(rows, ["model"], ks=(1,)).iloc[0]
    assert s["faster_share"] == pytest.approx(3 / 5)
    assert s["faster_share_lo"] < s["faster_share"] < s["faster_share_hi"]
    assert 0 <= s["faster_share_lo"] and s["faster_share_hi"] <= 1
    # by hand: the same draws as the geomean's, each draw's faster correct samples over its correct, timed ones
    r = intervals.resample([4, 3])
    speedup = np.array([2.0, 1.5, 0.5, np.nan, 1.2, 0.8, np.nan])
    draws = [(speedup[i][speedup[i] > 0] > 1).mean() for i in r.index if (speedup[i] > 0).any()]
    assert (s["faster_share_lo"], s["faster_share_hi"]) == pytest.approx(tuple(np.percentile(draws, [2.5, 97.5])))
    every = summarize(_rows({"p": [("correct", 2.0), ("correct", 3.0)]}), ["model"], ks=(1,)).iloc[0]
    assert every["faster_share"] == every["faster_share_lo"] == every["faster_share_hi"] == 1.0
    none = summarize(_rows({"p": [("wrong_output", None)]}), ["model"], ks=(1,)).iloc[0]
    assert math.isnan(none["faster_share"]) and math.isnan(none["faster_share_lo"])


def test_a_measured_median_and_a_ratio_of_medians_have_intervals_from_the_measurements():
    one = [40.0, 42.0, 39.0, 45.0, 41.0]
    spread = [100.0, 96.0, 110.0, 104.0]
    lo, hi = intervals.measured_median(one)
    assert lo < np.median(one) < hi and (lo, hi) == intervals.measured_median(one)  # seeded
    ratio = np.median(spread) / np.median(one)
    lo, hi = intervals.ratio_of_medians(spread, one)
    assert lo < ratio < hi and hi < 3 and lo > 2
    assert intervals.measured_median([40.0, 40.0, None, math.nan]) == (40.0, 40.0)  # equal: zero width
    # one measurement on a side: no spread to resample, no interval
    assert all(map(math.isnan, intervals.measured_median([40.0, None])))
    assert all(map(math.isnan, intervals.ratio_of_medians([100.0], one)))


def test_speedup_interval_from_the_rounds_spread():
    """One sample's speedup interval: it holds the point estimate, widens with noisier rounds, is
    seeded (the same rounds, the same interval), and is None with fewer than 2 rounds."""
    from pkb_ray.measure.timing import speedup_interval

    rng = np.random.default_rng(1)
    ref = 100 + rng.normal(0, 1, 20)
    quiet = speedup_interval(ref, 50 + rng.normal(0, 0.5, 20))
    noisy = speedup_interval(ref, 50 + rng.normal(0, 10, 20))
    assert quiet[0] < 2.0 < quiet[1]
    assert noisy[1] - noisy[0] > 3 * (quiet[1] - quiet[0])
    assert speedup_interval(ref, ref) == (1.0, 1.0)  # identical rounds: no spread
    assert speedup_interval(list(ref), list(ref * 2)) == speedup_interval(list(ref), list(ref * 2))
    assert speedup_interval([100.0], [50.0]) is None
