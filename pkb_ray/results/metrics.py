"""Scores over result rows: pass@k, fast_p@k, speedup and speed-of-light aggregates.

Pure functions: no Ray, no processes, no torch. :func:`pass_at_k` is the one estimator;
:func:`fast_p_at_k` reuses it with "correct and faster than p" as success. :func:`curves` gives
pass@k and fast_p@k against k (with bootstrap bands), :func:`fast_p_curve` fast_p@1 against p
(with Wilson intervals, as the scores below), each point with its uncertainty (docs/statistics.md).

:func:`summarize` turns a DataFrame of result rows (columns as in ``RESULT_SCHEMA``) into one
row per group. Its columns, after the ``by`` columns:

``n``
    number of samples (result rows) in the group.
``problems``
    number of (model, problem) units in the group that have a sample the hardware could run.
``pass@{k}``
    e.g. ``pass@1``, ``pass@5``: the unbiased pass@k, computed *per problem* (n and c counted
    per (model, problem_id)) and then averaged over the problems in the group, as HumanEval
    and KernelBench do. Samples the hardware could not run (``unsupported_hardware``) are neither
    passes nor failures: they are left out of n and c (still counted in ``n_unsupported_hardware``). A problem with fewer than k samples has no pass@k (NaN) and is left
    out of the mean; the group's value is NaN when no problem has k samples.
``pass@{k}_se``
    its standard error (:func:`pass_at_k_variance`): sqrt(sum of the problems' variances) / P over
    the P problems averaged, the problems held fixed. NaN when any of them has exactly k samples
    (one draw of k: no variance to estimate).
``pass@{k}_lo``, ``pass@{k}_hi``
    its 95 % Wilson score interval (:func:`rate_interval`) over an effective sample size: Kish's
    p(1 - p) / se², at most N / k, N the samples of the P problems (N / k where se is 0 or NaN or p
    is 0 or 1). Never of zero width, never narrower than a binomial's over N / k draws; NaN with pass@k.
``pass@{k}_problems``
    over how many of ``problems`` pass@k was taken (those with at least k samples).
``fast_{p}@1``
    KernelBench's fast_p for p in :data:`FAST_P_THRESHOLDS`, spelled ``fast_0.0@1`` ...
    ``fast_2.0@1``: fast_p@1 (success = correct and speedup > p; p = 0 counts every correct
    sample), per problem and then averaged over problems like pass@k.
``fast_{p}@1_lo``, ``fast_{p}@1_hi``
    its 95 % Wilson interval, as pass@1's with "correct and faster than p" as success.
``geomean_speedup``, ``median_speedup``
    over the correct samples of the group, pooled; None/NaN/non-positive speedups are ignored.
    NaN when there is none.
``median_sol_fraction``
    median fraction of speed of light over the correct samples of the group, pooled, same rule.
``faster_share``
    the share of the group's correct, timed samples (positive speedup) faster than the reference
    (speedup > 1), pooled like the speedups; NaN when there is none. Unlike fast_1.0@1 it counts
    correct samples only, so it says how often a kernel that works is faster.
``geomean_speedup_lo``, ``_hi`` (and ``median_speedup_*``, ``median_sol_fraction_*``, ``faster_share_*``)
    their 95 % bootstrap intervals (:mod:`pkb_ray.results.intervals`: samples resampled within problems);
    NaN with fewer than :data:`MIN_SAMPLES` correct, timed samples.
``n_{status}``
    one count per :class:`Status`, in the enum's order, zeros included
    (``n_invalid_sample``, ..., ``n_wrong_output``, ``n_correct``).
"""

from __future__ import annotations

import math
import statistics
import warnings
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from pkb_ray.results import intervals
from pkb_ray.spec.names import Status

MIN_SAMPLES = 2  # a speedup figure from fewer correct, timed samples has no interval ("n/a")
FAST_P_THRESHOLDS = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)  # KernelBench's fast_p, p = 0 is "correct"
CURVE_THRESHOLDS = tuple(round(0.1 * i, 1) for i in range(31))  # fast_p@1 against p: 0 to 3, KernelBench's among them
PROBLEM_KEY = ("model", "problem_id")  # the unit pass@k is estimated on


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of n samples with c correct: 1 - C(n-c, k) / C(n, k) (Chen et al. 2021).

    Computed stably as 1 - prod_{i=n-c+1..n} (1 - k/i); 1.0 when n - c < k (every draw of k
    contains a correct sample). Raises ValueError unless 0 <= c <= n and 1 <= k <= n.
    """
    if n < 0 or c < 0 or k < 1:
        raise ValueError(f"need n >= 0, c >= 0, k >= 1; got n={n}, c={c}, k={k}")
    if c > n or k > n:
        raise ValueError(f"need c <= n and k <= n; got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def pass_at_k_variance(n: int, c: int, k: int) -> float:
    """Estimated variance of :func:`pass_at_k` (n samples, c correct): the jackknife over the
    samples, (n-1)/n * sum_i (theta_(i) - mean)^2 with theta_(i) the estimate without sample i.
    For k = 1 it is the unbiased p(1 - p)/(n - 1), p = c/n. NaN when n <= k (no estimate
    without a sample left out)."""
    if k >= n:
        pass_at_k(n, c, k)  # the same argument checks
        return math.nan
    without_correct = pass_at_k(n - 1, c - 1, k) if c else 0.0
    without_wrong = pass_at_k(n - 1, c, k) if c < n else 0.0
    mean = (c * without_correct + (n - c) * without_wrong) / n
    return (n - 1) / n * (c * (without_correct - mean) ** 2 + (n - c) * (without_wrong - mean) ** 2)


def pass_se(variances: Sequence[float]) -> float:
    """Standard error of a mean over problems of their estimates, from each one's variance
    (problems held fixed): sqrt(sum) / P; NaN without problems or when any variance is NaN."""
    if not len(variances) or any(math.isnan(v) for v in variances):
        return math.nan
    return math.sqrt(sum(variances)) / len(variances)


def fast_p_at_k(n: int, correct_speedups: Iterable[float | None], p: float, k: int = 1) -> float:
    """fast_p@k of n samples: pass@k where success = correct and speedup > p.

    ``correct_speedups`` holds one entry per *correct* sample (so at most n entries): its
    speedup, or None/NaN when it was not timed (which never counts as a success).
    """
    c = sum(1 for s in correct_speedups if s is not None and s > p)
    return pass_at_k(n, c, k)


def _positive(xs: Iterable[float | None]) -> list[float]:
    """The finite, strictly positive values of xs (None and NaN dropped)."""
    return [float(x) for x in xs if x is not None and math.isfinite(x) and x > 0]


def geomean(xs: Iterable[float | None]) -> float | None:
    """Geometric mean of the positive values of xs; None when there is none."""
    vals = _positive(xs)
    return math.exp(sum(map(math.log, vals)) / len(vals)) if vals else None


def median_speedup(correct_speedups: Iterable[float | None]) -> float | None:
    """Median of the positive speedups of correct samples; None when there is none."""
    vals = _positive(correct_speedups)
    return statistics.median(vals) if vals else None


def median_sol_fraction(correct_sol_fractions: Iterable[float | None]) -> float | None:
    """Median fraction of speed of light (sol_time / cand_time) of correct samples; None if none."""
    vals = _positive(correct_sol_fractions)
    return statistics.median(vals) if vals else None


def status_counts(statuses: Iterable[Status | str]) -> dict[str, int]:
    """Count per status value, every Status present (zeros included), in the enum's order.

    Raises ValueError on a string that is not a Status value.
    """
    counts = {s.value: 0 for s in Status}
    for s in statuses:
        counts[Status(s).value] += 1
    return counts


def pass_col(k: int) -> str:
    """Column name of pass@k in :func:`summarize`, e.g. ``pass@5``."""
    return f"pass@{k}"


def fast_col(p: float) -> str:
    """Column name of fast_p@1 in :func:`summarize`, e.g. ``fast_1.5@1``."""
    return f"fast_{float(p)}@1"


def _nan(x: float | None) -> float:
    return math.nan if x is None else x


def _problem_rates(pg: pd.DataFrame, ks: Sequence[int], ps: Sequence[float]) -> dict[str, float]:
    """n, pass@k and its variance (NaN where k > n) and fast_p@1 and its variance of the samples of
    one problem."""
    n = len(pg)
    correct = pg["status"] == Status.CORRECT.value
    c = int(correct.sum())
    row = {"n": n, **{pass_col(k): pass_at_k(n, c, k) if k <= n else math.nan for k in ks}}
    row.update({f"{pass_col(k)}_var": pass_at_k_variance(n, c, k) if k <= n else math.nan for k in ks})
    speedups = pg.loc[correct, "speedup"].tolist()
    for p in ps:
        fast = sum(1 for s in speedups if s is not None and s > p)
        row[fast_col(p)], row[f"{fast_col(p)}_var"] = pass_at_k(n, fast, 1), pass_at_k_variance(n, fast, 1)
    return row


def rate_interval(rates: Sequence[float], variances: Sequence[float], trials: float) -> tuple[float, float]:
    """The 95 % Wilson interval of a mean over problems of their rates (pass@k, fast_p@1), each with
    its variance: over the effective sample size of the standard error (:func:`pass_se`), at most
    ``trials`` (the samples, or draws of k for pass@k), and ``trials`` where that error is 0 or NaN
    (:func:`pkb_ray.results.intervals.effective_n`, docs/statistics.md). (NaN, NaN) without rates."""
    p = float(np.mean(rates)) if len(rates) else math.nan
    return intervals.wilson(p, intervals.effective_n(p, pass_se(variances), trials))


def _group_row(g: pd.DataFrame, ks: Sequence[int], ps: Sequence[float]) -> dict[str, float]:
    """All summary metrics of one group of result rows (see the module docstring)."""
    runnable = g[g["status"] != Status.UNSUPPORTED_HARDWARE.value]
    by_problem = [pg for _, pg in runnable.groupby(list(PROBLEM_KEY), dropna=False)]
    problems = [_problem_rates(pg, ks, ps) for pg in by_problem]
    rates = pd.DataFrame(problems, columns=["n", *(f"{c}{v}" for c in [*map(pass_col, ks), *map(fast_col, ps)]
                                                   for v in ("", "_var"))])

    def wilson(column: str, k: int = 1) -> list[tuple[str, float]]:  # over the problems with >= k samples
        having = rates[rates[column].notna()]
        bounds = rate_interval(having[column].tolist(), having[f"{column}_var"].tolist(), having["n"].sum() / k)
        return list(zip((f"{column}_lo", f"{column}_hi"), bounds))

    ok = g[g["status"] == Status.CORRECT.value]
    points = {
        "geomean_speedup": _nan(geomean(ok["speedup"])),
        "median_speedup": _nan(median_speedup(ok["speedup"])),
        "median_sol_fraction": _nan(median_sol_fraction(ok["sol_fraction"])),
        "faster_share": _faster_share(ok["speedup"]),
    }
    bounds = _bootstrap(pd.concat(by_problem) if by_problem else runnable, [len(pg) for pg in by_problem])
    return {
        "n": len(g),
        "problems": len(problems),
        **{pass_col(k): rates[pass_col(k)].mean() for k in ks},  # skips NaN: problems with fewer than k samples
        **{f"{pass_col(k)}_se": pass_se(rates[f"{pass_col(k)}_var"][rates[pass_col(k)].notna()].tolist()) for k in ks},
        **{c: v for k in ks for c, v in wilson(pass_col(k), k)},
        **{f"{pass_col(k)}_problems": int(rates[pass_col(k)].notna().sum()) for k in ks},
        **{c: v for p in ps for c, v in ((fast_col(p), rates[fast_col(p)].mean()), *wilson(fast_col(p)))},
        **{c: v for name, point in points.items() for c, v in ((name, point), *bounds[name])},
        **{f"n_{s}": v for s, v in status_counts(g["status"]).items()},
    }


def _bootstrap(samples: pd.DataFrame, sizes: list[int]) -> dict[str, list[tuple[str, float]]]:
    """The ``_lo`` and ``_hi`` columns of the speedup figures of one group, whose ``samples`` lie
    problem after problem (``sizes``): see :mod:`pkb_ray.results.intervals`."""
    r = intervals.resample(sizes)
    correct = (samples["status"] == Status.CORRECT.value).to_numpy()
    speedup = samples["speedup"].astype(float).where(correct).to_numpy()
    sol = samples["sol_fraction"].astype(float).where(correct).to_numpy()
    spread = (intervals.log_spread(samples["speedup_lo"], samples["speedup_hi"])
              if "speedup_lo" in samples and "speedup_hi" in samples else None)
    drawn = intervals.drawn_speedups(r, speedup, spread)  # samples, and each one's time from its rounds
    draws = {}
    with np.errstate(invalid="ignore"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a draw without a speedup: NaN
            draws["geomean_speedup"] = np.exp(np.nanmean(np.log(drawn), axis=1))
        draws["median_speedup"] = intervals.median_of(drawn)
        timed = (drawn > 0).sum(axis=1)
        draws["faster_share"] = np.where(timed > 0, (drawn > 1).sum(axis=1) / np.maximum(timed, 1), np.nan)
    draws["median_sol_fraction"] = intervals.median(r, sol)
    # one timed, correct sample says nothing of the spread across samples: no interval
    few = int(np.isfinite(speedup).sum()) < MIN_SAMPLES
    return {name: list(zip((f"{name}_lo", f"{name}_hi"), (math.nan, math.nan) if few else intervals.interval(d)))
            for name, d in draws.items()}


def _faster_share(correct_speedups: Iterable[float | None]) -> float:
    """The share of the positive speedups of correct samples above 1; NaN when there is none."""
    vals = _positive(correct_speedups)
    return sum(v > 1 for v in vals) / len(vals) if vals else math.nan


def summary_columns(
    ks: Sequence[int] = (1, 5, 10), ps: Sequence[float] = FAST_P_THRESHOLDS
) -> list[str]:
    """The metric columns :func:`summarize` produces, in order (after the ``by`` columns)."""
    bounded = lambda name: [name, f"{name}_lo", f"{name}_hi"]  # noqa: E731
    return (
        ["n", "problems"]
        + [pass_col(k) for k in ks]
        + [f"{pass_col(k)}_se" for k in ks]
        + [f"{pass_col(k)}{end}" for k in ks for end in ("_lo", "_hi")]
        + [f"{pass_col(k)}_problems" for k in ks]
        + [c for p in ps for c in bounded(fast_col(p))]
        + [c for name in ("geomean_speedup", "median_speedup", "median_sol_fraction", "faster_share")
           for c in bounded(name)]
        + [f"n_{s.value}" for s in Status]
    )


def summarize(
    df: pd.DataFrame,
    by: Sequence[str],
    ks: Sequence[int] = (1, 5, 10),
    ps: Sequence[float] = FAST_P_THRESHOLDS,
) -> pd.DataFrame:
    """One row per group of ``by`` (e.g. ["model"], ["model", "problem_id"], ["model", "category"]).

    Needs the columns model, problem_id, status (a Status value string), speedup, sol_fraction
    and the ``by`` columns. pass@k and fast_p@1 are computed per (model, problem_id) and averaged
    over the group's problems; see the module docstring for every column.
    """
    by = list(by)
    rows = [
        {**dict(zip(by, key)), **_group_row(g, ks, ps)}
        for key, g in df.groupby(by, sort=True, dropna=False)
    ]
    return pd.DataFrame(rows, columns=by + summary_columns(ks, ps))


def pass_at_k_table(n: int, k: int) -> np.ndarray:
    """:func:`pass_at_k` of n samples for every c = 0..n at once (index c), as the same product:
    1 - prod_{j<c} (1 - k/(n-j)), 1.0 where n - c < k."""
    if k < 1 or k > n:
        raise ValueError(f"need 1 <= k <= n; got n={n}, k={k}")
    factors = np.maximum(1.0 - k / (n - np.arange(n, dtype=float)), 0.0)
    return 1.0 - np.concatenate([[1.0], np.cumprod(factors)])


def curves(df: pd.DataFrame, by: Sequence[str] = ("model",), ps: Sequence[float] = (1.0,),
           max_k: int | None = None, same_problems: bool = True, bootstrap: bool = True) -> pd.DataFrame:
    """pass@k and fast_p@k for k = 1..n, per group of ``by``: long format, columns
    ``by + [metric, k, value, se, lo, hi, problems]``, metric ``pass`` or ``fast_{p}``.

    As in :func:`summarize`: estimated per (model, problem_id), then averaged over the group's
    problems that have at least k samples (``problems`` says how many did). With
    ``same_problems`` (the default) k stops at the fewest samples any problem of the group has,
    so every point averages the same problems and a curve never falls.

    ``se``: the standard error, as ``pass@{k}_se`` (:func:`pass_at_k_variance`, :func:`pass_se`;
    fast_p@k is pass@k with "correct and faster than p" as success, so its variance is the same
    estimator's); NaN when a problem averaged has exactly k samples. ``lo``, ``hi``: the 95 %
    bootstrap band (:mod:`pkb_ray.results.intervals`: one set of draws per group, samples resampled within
    problems, the estimator recomputed at every k on each draw; not :func:`summarize`'s Wilson
    intervals, so it closes onto 0 or 1 where every sample fails or passes); NaN without ``bootstrap``.
    """
    by = list(by)
    out = []
    for key, g in df[df["status"] != Status.UNSUPPORTED_HARDWARE.value].groupby(by, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        problems = [pg for _, pg in g.groupby(list(PROBLEM_KEY), dropna=False)]
        sizes = np.array([len(pg) for pg in problems])
        samples = pd.concat(problems)
        correct = (samples["status"] == Status.CORRECT.value).to_numpy()
        speedup = samples["speedup"].astype(float).where(correct).to_numpy()
        success = {"pass": correct}
        success.update({f"fast_{float(p)}": np.isfinite(speedup) & (speedup > p) for p in ps})
        starts = np.cumsum([0, *sizes[:-1]])
        r = intervals.resample(sizes.tolist()) if bootstrap else None
        top = int((min if same_problems else max)(sizes))
        ks = range(1, min(top, max_k or top) + 1)
        rows: dict[tuple[str, int], dict] = {}
        for name, ok in success.items():
            c = np.add.reduceat(ok.astype(np.int64), starts)
            drawn = intervals.counts(r, ok) if bootstrap else None
            for k in ks:
                having = np.flatnonzero(sizes >= k)
                point = {"value": float(np.mean([pass_at_k(int(sizes[i]), int(c[i]), k) for i in having])),
                         "se": pass_se([pass_at_k_variance(int(sizes[i]), int(c[i]), k) for i in having]),
                         "lo": math.nan, "hi": math.nan}
                if bootstrap:
                    draws = np.mean([pass_at_k_table(int(sizes[i]), k)[drawn[:, i]] for i in having], axis=0)
                    point["lo"], point["hi"] = intervals.interval(draws)
                rows[(name, k)] = {**dict(zip(by, key)), "metric": name, "k": k, **point, "problems": len(having)}
        out += [rows[(name, k)] for k in ks for name in success]
    return pd.DataFrame(out, columns=by + ["metric", "k", "value", "se", "lo", "hi", "problems"])


def fast_p_curve(df: pd.DataFrame, by: Sequence[str] = ("model",),
                 ps: Sequence[float] = CURVE_THRESHOLDS) -> pd.DataFrame:
    """fast_p@1 against the threshold p (``ps``), per group of ``by``: columns
    ``by + [p, value, lo, hi, problems]``; each value and its 95 % Wilson interval is
    :func:`summarize`'s ``fast_{p}@1`` with ``_lo``/``_hi`` (:func:`rate_interval`)."""
    by = list(by)
    out = []
    for key, g in df[df["status"] != Status.UNSUPPORTED_HARDWARE.value].groupby(by, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        problems = [pg for _, pg in g.groupby(list(PROBLEM_KEY), dropna=False)]
        sizes = [len(pg) for pg in problems]
        fast = []  # per problem, per p: its samples correct and faster than p
        for pg in problems:
            speedup = pg["speedup"].astype(float).where(pg["status"] == Status.CORRECT.value).to_numpy()
            with np.errstate(invalid="ignore"):  # NaN > p: False
                fast.append((speedup[:, None] > np.asarray(ps, dtype=float)).sum(axis=0))
        for i, p in enumerate(ps):
            rates = [pass_at_k(n, int(c[i]), 1) for n, c in zip(sizes, fast)]
            variances = [pass_at_k_variance(n, int(c[i]), 1) for n, c in zip(sizes, fast)]
            lo, hi = rate_interval(rates, variances, sum(sizes))
            out.append({**dict(zip(by, key)), "p": float(p), "value": float(np.mean(rates)),
                        "lo": lo, "hi": hi, "problems": len(problems)})
    return pd.DataFrame(out, columns=by + ["p", "value", "lo", "hi", "problems"])


def as_scored(df: pd.DataFrame) -> pd.DataFrame:
    """Result rows as the scores count them (the metrics estimate per (model, problem_id)):
    ``model`` names the model with its hardware when a model ran on several, ``problem_id``
    carries the world size when the rows span several, and the size (``@ numel=8192``) and the
    dtype (`` bfloat16``) for a problem evaluated at several. ``base_problem`` keeps the problem's
    own id."""
    df = df.copy()
    df["base_problem"] = df["problem_id"]
    several_hw = df.groupby("model")["hardware"].nunique().gt(1)
    df["model"] = [f"{m} @ {h}" if several_hw.get(m, False) else m for m, h in zip(df["model"], df["hardware"])]
    if df["world_size"].nunique() > 1:
        df["problem_id"] = [f"{p} W={w}" for p, w in zip(df["problem_id"], df["world_size"])]
    for column, join in (("size", " @ "), ("dtype", " ")):  # each size (dtype) of a sweep: a problem of its own
        if column not in df:
            continue
        several = df.groupby("base_problem")[column].transform("nunique").gt(1)
        if several.any():
            df.loc[several, "problem_id"] = [f"{p}{join}{v}" for p, v in
                                             zip(df.loc[several, "problem_id"], df.loc[several, column])]
    return df


def timing_note(df: pd.DataFrame) -> str:
    """What the times are: eager calls, graph replays (eval.timing_mode), or a mix, with counts."""
    timed = df[df["cand_time_us"].notna()] if "cand_time_us" in df else df.iloc[0:0]
    modes = timed["timing_mode"].replace("", "eager").fillna("eager") if "timing_mode" in timed else None
    if modes is None or modes.empty:
        return "times: none"
    counts = modes.value_counts()
    if len(counts) == 1:
        return f"times: {'graph replays' if counts.index[0] == 'graph' else 'eager calls'}"
    return "times: " + ", ".join(f"{m} {n}" for m, n in counts.items())


# One answer per slot and round. Where a row states them, its size, dtype and hardware belong to the
# slot too: the same sample evaluated at several sizes is several answers, not versions of one.
SAMPLE_SLOT = ["model", "problem_id", "sample_index", "world_size", "size", "dtype", "hardware"]


def state_after(df: pd.DataFrame, round_: int) -> pd.DataFrame:
    """Each sample's latest version after refinement round ``round_`` (round 0: the first answers)."""
    if df.empty:
        return df
    rounds = df["round"].fillna(0).astype(int) if "round" in df else pd.Series(0, index=df.index)
    kept = df[rounds <= round_].assign(_round=rounds[rounds <= round_])
    slot = [c for c in SAMPLE_SLOT if c in df]
    return kept.sort_values("_round").drop_duplicates(slot, keep="last").drop(columns="_round")


def final_and_rounds(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """(each sample's latest version, pass@1 and fast_1.0@1 after each round or None without refinement).

    Only evaluations on one node count: a gang spread over nodes (``hardware.spread``) measures the
    same samples again for the inter-node comparison, which must not count as more samples.
    """
    if "nodes" in df:
        df = df[df["nodes"].fillna(1).astype(int) == 1]
    last = int(df["round"].fillna(0).max()) if "round" in df and len(df) else 0
    return state_after(df, last), (by_round(df, last) if last else None)


def by_round(df: pd.DataFrame, max_round: int) -> pd.DataFrame:
    """pass@1 (with its SE and interval), fast_1.0@1 and geomean speedup (with their intervals) per
    model after each refinement round 0..max_round."""
    scores = [*(f"{pass_col(1)}{end}" for end in ("", "_se", "_lo", "_hi")),
              *(f"{c}{end}" for c in (fast_col(1.0), "geomean_speedup") for end in ("", "_lo", "_hi"))]
    frames = []
    for r in range(max_round + 1):
        s = summarize(state_after(df, r), ["model"], ks=(1,), ps=(1.0,))
        frames.append(s[["model", "n", *scores]].assign(round=r))
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return out[["model", "round", "n", *scores]] if len(out) else out
