"""Metrics against values worked out by hand (the arithmetic is in the comments)."""

from __future__ import annotations

import itertools
import math

import pandas as pd
import pytest

from pkb_ray.results.metrics import (
    FAST_P_THRESHOLDS,
    fast_p_at_k,
    geomean,
    median_sol_fraction,
    median_speedup,
    pass_at_k,
    pass_at_k_table,
    status_counts,
    summarize,
    summary_columns,
)
from pkb_ray.spec.names import Status
from pkb_ray.spec.schema import Result, results_to_table

# ---------------------------------------------------------------- pass@k


@pytest.mark.parametrize(
    "n, c, k, expected",
    [
        (5, 2, 1, 0.4),  # 1 - C(3,1)/C(5,1) = 1 - 3/5
        (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (4, 0, 2, 0.0),  # no correct sample: never passes
        (3, 2, 2, 1.0),  # n - c = 1 < k = 2: every pair holds a correct one
        (10, 3, 4, 5 / 6),  # 1 - C(7,4)/C(10,4) = 1 - 35/210
        (1, 1, 1, 1.0),
        (1, 0, 1, 0.0),
    ],
)
def test_pass_at_k_hand_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_matches_brute_force_enumeration():
    # Probability that a random k-subset of n samples (first c correct) holds a correct one.
    for n in range(1, 7):
        for c in range(n + 1):
            for k in range(1, n + 1):
                draws = list(itertools.combinations(range(n), k))
                hit = sum(any(i < c for i in d) for d in draws) / len(draws)
                assert pass_at_k(n, c, k) == pytest.approx(hit), (n, c, k)


def test_pass_at_k_at_one_is_fraction_correct():
    assert pass_at_k(200, 37, 1) == pytest.approx(37 / 200)


@pytest.mark.parametrize(
    "n, c, k",
    [(5, 2, 6), (5, 6, 1), (-1, 0, 1), (5, -1, 1), (5, 2, -1), (5, 2, 0), (0, 0, 1)],
)
def test_pass_at_k_rejects_bad_arguments(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_pass_at_k_table_is_pass_at_k_for_every_c():
    # the bootstrap looks pass@k up by the drawn c: every c of n at once, the same products
    for n in range(1, 9):
        for k in range(1, n + 1):
            assert pass_at_k_table(n, k).tolist() == pytest.approx([pass_at_k(n, c, k) for c in range(n + 1)])
    table = pass_at_k_table(1000, 10)  # large n: stable (no binomials), and rising with c to 1
    assert table[0] == 0.0 and table[-1] == 1.0 and (table[1:] >= table[:-1]).all()
    assert table[370] == pytest.approx(pass_at_k(1000, 370, 10))
    for n, k in ((3, 4), (3, 0)):
        with pytest.raises(ValueError):
            pass_at_k_table(n, k)


def test_curves_columns_and_their_uncertainty():
    from pkb_ray.results.metrics import curves

    rows = pd.DataFrame([_row("A", p, "c", s, sp) for p, s, sp in (
        ("p1", "correct", 2.0), ("p1", "correct", 0.5), ("p1", "crash", None),
        ("p2", "correct", 1.5), ("p2", "wrong_output", None), ("p2", "correct", 3.0))])
    c = curves(rows, ["model"], ps=(1.0,))
    assert list(c.columns) == ["model", "metric", "k", "value", "se", "lo", "hi", "problems"]
    assert list(zip(c["metric"], c["k"])) == [("pass", 1), ("fast_1.0", 1), ("pass", 2), ("fast_1.0", 2),
                                               ("pass", 3), ("fast_1.0", 3)]
    # pass@1 = (2/3 + 2/3) / 2; its SE: sqrt(2 * (2/3 * 1/3 / 2)) / 2 (pass_at_k_variance at k = 1)
    first = c.iloc[0]
    assert first["value"] == pytest.approx(2 / 3) and first["se"] == pytest.approx(math.sqrt(2 / 9) / 2)
    assert c["lo"].notna().all() and c["hi"].notna().all()
    plain = curves(rows, ["model"], ps=(1.0,), bootstrap=False)
    assert plain["lo"].isna().all() and plain["value"].equals(c["value"]) and plain["se"].equals(c["se"])


# ---------------------------------------------------------------- fast_p@k


def test_fast_p_at_1_hand_values():
    # n = 4: three correct with speedups 0.8, 1.2, 2.5 and one wrong.
    correct = [0.8, 1.2, 2.5]
    assert fast_p_at_k(4, correct, 1.0) == pytest.approx(2 / 4)  # 1.2, 2.5 > 1.0
    assert fast_p_at_k(4, correct, 1.5) == pytest.approx(1 / 4)  # 2.5 > 1.5
    assert fast_p_at_k(4, correct, 2.0) == pytest.approx(1 / 4)  # 2.5 > 2.0
    assert fast_p_at_k(4, correct, 3.0) == 0.0


def test_fast_p_threshold_is_strict_and_untimed_never_counts():
    # speedup exactly p is not faster; None / NaN (correct but untimed) is not a success.
    assert fast_p_at_k(3, [1.0, None, math.nan], 1.0) == 0.0
    assert fast_p_at_k(3, [1.0, None, math.nan], 0.5) == pytest.approx(1 / 3)


def test_fast_p_at_k_reuses_pass_at_k():
    # 2 of n = 4 are fast at p = 1.0: fast_1.0@2 = 1 - C(2,2)/C(4,2) = 1 - 1/6.
    assert fast_p_at_k(4, [0.8, 1.2, 2.5], 1.0, k=2) == pytest.approx(5 / 6)


def test_fast_p_rejects_more_correct_than_samples():
    with pytest.raises(ValueError):
        fast_p_at_k(2, [2.0, 2.0, 2.0], 1.0)


def test_fast_p_thresholds_are_kernelbenchs():
    assert FAST_P_THRESHOLDS == (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)


# ---------------------------------------------------------------- speedup / SOL aggregates


def test_geomean():
    assert geomean([1, 4]) == pytest.approx(2.0)  # sqrt(1 * 4)
    assert geomean([0.5, 2.0, 8.0]) == pytest.approx(2.0)  # (0.5 * 2 * 8) ** (1/3) = 8 ** (1/3)
    assert geomean([1, 4, None, 0.0, -3.0, math.nan]) == pytest.approx(2.0)  # invalid ignored
    assert geomean([]) is None
    assert geomean([None, 0.0]) is None


def test_median_speedup_and_sol_fraction():
    assert median_speedup([3.0, 1.0, 2.0, None]) == 2.0
    assert median_speedup([1.0, 4.0]) == pytest.approx(2.5)  # (1 + 4) / 2
    assert median_speedup([None, -1.0]) is None
    assert median_sol_fraction([0.2, 0.6, None, math.nan]) == pytest.approx(0.4)  # (0.2+0.6)/2
    assert median_sol_fraction([]) is None


# ---------------------------------------------------------------- status counts


def test_status_counts_every_status_in_enum_order_with_zeros():
    counts = status_counts(["correct", Status.TIMEOUT, "correct", "crash"])
    assert list(counts) == [s.value for s in Status]
    assert counts == {
        "invalid_sample": 0,
        "unsupported_hardware": 0,
        "compile_error": 0,
        "import_error": 0,
        "runtime_error": 0,
        "timeout": 1,
        "crash": 1,
        "wrong_output": 0,
        "tampering": 0,
        "correct": 2,
    }
    assert sum(status_counts([]).values()) == 0


def test_status_counts_rejects_unknown_status():
    with pytest.raises(ValueError):
        status_counts(["correct", "exploded"])


# ---------------------------------------------------------------- summarize


def _row(model, pid, cat, status, speedup=None, sol=None):
    return dict(
        model=model, problem_id=pid, category=cat, status=status, speedup=speedup, sol_fraction=sol
    )


@pytest.fixture
def results() -> pd.DataFrame:
    # Model A: p1 has 4 correct samples, p2 has 1 sample that fails to compile.
    # Model B: p1 = {correct at speedup exactly 1.0, wrong}, p2 = {correct at 3.0, timeout}.
    rows = [
        _row("A", "p1", "comm", "correct", 4.0, 0.8),
        _row("A", "p1", "comm", "correct", 2.0, 0.4),
        _row("A", "p1", "comm", "correct", 0.5, 0.1),
        _row("A", "p1", "comm", "correct", 0.25, 0.05),
        _row("A", "p2", "gemm", "compile_error"),
        _row("B", "p1", "comm", "correct", 1.0, 0.5),
        _row("B", "p1", "comm", "wrong_output", 9.0, 0.9),  # wrong: its speed must not count
        _row("B", "p2", "gemm", "correct", 3.0, 0.9),
        _row("B", "p2", "gemm", "timeout"),
    ]
    return pd.DataFrame(rows)


def test_summarize_columns(results):
    out = summarize(results, ["model"], ks=(1, 2))
    assert list(out.columns) == ["model"] + summary_columns((1, 2))
    assert summary_columns((1, 2)) == [
        "n", "problems", "pass@1", "pass@2", "pass@1_se", "pass@2_se", "pass@1_lo", "pass@1_hi", "pass@2_lo",
        "pass@2_hi", "pass@1_problems", "pass@2_problems",
        "fast_0.0@1", "fast_0.0@1_lo", "fast_0.0@1_hi", "fast_0.5@1", "fast_0.5@1_lo", "fast_0.5@1_hi",
        "fast_0.8@1", "fast_0.8@1_lo", "fast_0.8@1_hi", "fast_1.0@1", "fast_1.0@1_lo", "fast_1.0@1_hi",
        "fast_1.5@1", "fast_1.5@1_lo", "fast_1.5@1_hi", "fast_2.0@1", "fast_2.0@1_lo", "fast_2.0@1_hi",
        "geomean_speedup", "geomean_speedup_lo", "geomean_speedup_hi", "median_speedup", "median_speedup_lo",
        "median_speedup_hi", "median_sol_fraction", "median_sol_fraction_lo", "median_sol_fraction_hi",
        "faster_share", "faster_share_lo", "faster_share_hi", "n_invalid_sample", "n_unsupported_hardware", "n_compile_error", "n_import_error", "n_runtime_error",
        "n_timeout", "n_crash", "n_wrong_output", "n_tampering", "n_correct",
    ]  # fmt: skip


def test_unsupported_hardware_is_neither_a_pass_nor_a_failure(results):
    refused = results.iloc[[0]].assign(status="unsupported_hardware", problem_id="only_refused")
    base = summarize(results, ["model"], ks=(1,)).set_index("model")
    more = summarize(pd.concat([results, refused, refused.assign(problem_id=results.iloc[0]["problem_id"])]),
                     ["model"], ks=(1,)).set_index("model")
    model = results.iloc[0]["model"]
    assert more.loc[model, "pass@1"] == base.loc[model, "pass@1"] and more.loc[model, "n_unsupported_hardware"] == 2
    assert more.loc[model, "n"] == base.loc[model, "n"] + 2


def test_summarize_by_model_averages_per_problem(results):
    out = summarize(results, ["model"], ks=(1, 2, 5)).set_index("model")
    a, b = out.loc["A"], out.loc["B"]
    assert a["n"] == 5 and a["n_correct"] == 4 and a["n_compile_error"] == 1 and a["n_timeout"] == 0
    # pass@1, A: p1 = 4/4, p2 = 0/1 -> mean (1 + 0) / 2 = 0.5.
    # Pooling the 5 samples would give 4/5 = 0.8 instead: per-problem averaging matters.
    assert a["pass@1"] == pytest.approx(0.5)
    assert pass_at_k(5, 4, 1) == pytest.approx(0.8) != a["pass@1"]
    # pass@2, A: p1 = 1.0; p2 has n = 1 < 2 -> NaN, left out -> 1.0 (not (1 + 0) / 2).
    assert a["pass@2"] == pytest.approx(1.0)
    # pass@5: no problem of A has 5 samples -> NaN; each pass@k says over how many problems it is
    assert math.isnan(a["pass@5"])
    assert (a["problems"], a["pass@1_problems"], a["pass@2_problems"], a["pass@5_problems"]) == (2, 2, 1, 0)
    # fast_0.0@1 counts every correct sample, fast_0.5@1 those above 0.5: p1 = 2/4 (4, 2) -> 0.25
    assert a["fast_0.0@1"] == pytest.approx(a["pass@1"]) and a["fast_0.5@1"] == pytest.approx(0.25)
    # fast_p@1, A: p1 speedups 4, 2, 0.5, 0.25; p2 none.
    #   p=1.0: p1 = 2/4 (4, 2), p2 = 0 -> 0.25;  p=1.5: same -> 0.25;  p=2.0: p1 = 1/4 -> 0.125.
    assert a["fast_1.0@1"] == pytest.approx(0.25)
    assert a["fast_1.5@1"] == pytest.approx(0.25)
    assert a["fast_2.0@1"] == pytest.approx(0.125)
    # Pooled over correct samples of A: geomean (4 * 2 * 0.5 * 0.25) ** (1/4) = 1 ** (1/4) = 1;
    # median of 0.25, 0.5, 2, 4 = (0.5 + 2) / 2 = 1.25; SOL median of .05, .1, .4, .8 = 0.25.
    assert a["geomean_speedup"] == pytest.approx(1.0)
    assert a["median_speedup"] == pytest.approx(1.25)
    assert a["median_sol_fraction"] == pytest.approx(0.25)

    # B: pass@1 p1 = 1/2, p2 = 1/2 -> 0.5.  pass@2 (n=2, c=1: n - c = 1 < 2) -> 1.0 each -> 1.0.
    assert b["pass@1"] == pytest.approx(0.5)
    assert b["pass@2"] == pytest.approx(1.0)
    # fast_1.0@1: p1's correct speedup is exactly 1.0 (not > 1.0), its 9.0 is wrong -> 0;
    # p2: 3.0 -> 1/2.  Mean (0 + 1/2) / 2 = 0.25; same for p = 1.5 and 2.0.
    assert b["fast_1.0@1"] == pytest.approx(0.25)
    assert b["fast_2.0@1"] == pytest.approx(0.25)
    # Correct speedups 1.0, 3.0: geomean sqrt(3), median 2.0; SOL (0.5 + 0.9) / 2 = 0.7.
    assert b["geomean_speedup"] == pytest.approx(math.sqrt(3))
    assert b["median_speedup"] == pytest.approx(2.0)
    assert b["median_sol_fraction"] == pytest.approx(0.7)
    assert (b["n_correct"], b["n_wrong_output"], b["n_timeout"]) == (2, 1, 1)


def test_summarize_by_problem_is_the_per_problem_value(results):
    out = summarize(results, ["model", "problem_id"], ks=(1, 2)).set_index(["model", "problem_id"])
    assert len(out) == 4
    assert out.loc[("A", "p1"), "pass@1"] == pytest.approx(1.0)
    assert out.loc[("A", "p2"), "pass@1"] == pytest.approx(0.0)
    assert math.isnan(out.loc[("A", "p2"), "pass@2"])  # n = 1 < k = 2
    assert out.loc[("A", "p1"), "fast_1.0@1"] == pytest.approx(0.5)  # 2 of 4 above 1.0
    assert math.isnan(out.loc[("A", "p2"), "geomean_speedup"])  # no correct sample
    assert out.loc[("B", "p1"), "n"] == 2


def test_summarize_by_category_averages_over_models_problems(results):
    out = summarize(results, ["category"], ks=(1,)).set_index("category")
    # comm = A/p1 (4/4) and B/p1 (1/2): mean (1 + 0.5) / 2 = 0.75; pooled would be 5/6.
    assert out.loc["comm", "pass@1"] == pytest.approx(0.75)
    # gemm = A/p2 (0/1) and B/p2 (1/2): (0 + 0.5) / 2 = 0.25; pooled would be 1/3.
    assert out.loc["gemm", "pass@1"] == pytest.approx(0.25)
    assert out.loc["comm", "n"] == 6 and out.loc["gemm", "n"] == 3


def test_summarize_empty_frame_keeps_columns(results):
    out = summarize(results.iloc[0:0], ["model"], ks=(1,))
    assert len(out) == 0 and list(out.columns) == ["model"] + summary_columns((1,))


def test_summarize_reads_results_written_with_the_schema():
    def result(i, status, speedup):
        return Result(
            sample_key=f"m/p/{i}", problem_id="p", model="m", sample_index=i,
            backend="torch", status=status, world_size=2, speedup=speedup,
        )  # fmt: skip

    table = results_to_table([result(0, Status.CORRECT, 2.0), result(1, Status.CRASH, None)])
    df = table.to_pandas()
    row = summarize(df, ["model"], ks=(1,)).iloc[0]
    # 1 of 2 correct -> pass@1 = 0.5; its speedup 2.0 is > 1.5 but not > 2.0.
    assert row["pass@1"] == pytest.approx(0.5)
    assert row["fast_1.5@1"] == pytest.approx(0.5) and row["fast_2.0@1"] == 0.0
    assert (row["n_correct"], row["n_crash"]) == (1, 1)


def test_each_size_of_a_sweep_is_its_own_answer_and_its_own_problem():
    """Before, a size sweep's summary kept one size per sample (the slot had no size) and the sizes
    it kept counted as samples of one problem."""
    from pkb_ray.results.metrics import as_scored, final_and_rounds

    rows = []
    for index, statuses in enumerate((("correct", "wrong_output"), ("correct", "correct"))):
        for size, status in zip(("small", "numel=8192"), statuses):
            rows.append(dict(model="m", problem_id="p", sample_index=index, world_size=2, size=size, dtype="float32",
                             hardware="h", round=0, category="c", status=status, speedup=1.5, sol_fraction=0.1))
    rows.append(dict(rows[0], round=1, status="wrong_output"))  # a refined version of sample 0 at "small"
    rows.append(dict(rows[0], problem_id="q"))  # q ran at one size: its id stays as it is
    df, by_round = final_and_rounds(as_scored(pd.DataFrame(rows)))
    assert sorted(zip(df["problem_id"], df["sample_index"])) == [
        ("p @ numel=8192", 0), ("p @ numel=8192", 1), ("p @ small", 0), ("p @ small", 1), ("q", 0)]
    assert set(df["base_problem"]) == {"p", "q"}
    assert df[df["problem_id"] == "p @ small"].sort_values("sample_index")["status"].tolist() == ["wrong_output", "correct"]
    per_problem = summarize(df, ["problem_id"], ks=(1,)).set_index("problem_id")["pass@1"]
    assert per_problem.to_dict() == {"p @ numel=8192": 0.5, "p @ small": 0.5, "q": 1.0}
    assert by_round is not None and by_round["round"].tolist() == [0, 1]
    # a results folder holding two dtypes of one problem: each dtype a problem of its own too
    both = pd.DataFrame([dict(rows[0], dtype=d, sample_index=0, round=0) for d in ("float32", "bfloat16")])
    assert sorted(as_scored(both)["problem_id"]) == ["p bfloat16", "p float32"]


def test_speedup_intervals_include_each_samples_timing_noise_and_are_na_below_two_samples():
    """The median speedup's interval combines the spread across samples with each sample's own
    timing spread (its rounds' interval); one sample gives no interval at all."""
    def frame(n, lo, hi, speedup=1.2):
        return pd.DataFrame({"model": "m", "problem_id": [f"p{i % 3}" for i in range(n)], "status": "correct",
                             "speedup": speedup, "sol_fraction": 0.5, "speedup_lo": lo, "speedup_hi": hi})

    quiet = summarize(frame(9, 1.2, 1.2), ["model"]).iloc[0]
    noisy = summarize(frame(9, 0.9, 1.6), ["model"]).iloc[0]
    assert quiet["median_speedup_lo"] == quiet["median_speedup_hi"] == pytest.approx(1.2)  # no spread anywhere
    assert noisy["median_speedup_lo"] < 1.2 < noisy["median_speedup_hi"]  # the same samples, noisy rounds
    assert noisy["median_speedup"] == pytest.approx(1.2)  # the point estimate is the samples' own
    one = summarize(frame(1, 0.9, 1.6), ["model"]).iloc[0]
    assert one["median_speedup"] == pytest.approx(1.2) and math.isnan(one["median_speedup_lo"])
    assert one["fast_1.0@1_lo"] < one["fast_1.0@1_hi"] == 1.0  # a rate has its Wilson interval from one sample
    from pkb_ray.summary.sections import with_interval

    assert with_interval(1.2, math.nan, math.nan) == "1.2 [n/a]"
