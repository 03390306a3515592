"""Confidence intervals of the scores of :mod:`pkb_ray.results.metrics`: Wilson score intervals of the rates
(pass@k, fast_p@1: :func:`wilson`, :func:`effective_n`), and bootstrap intervals of the geomean and
median speedup, median fraction of speed of light, the share of correct samples faster than the
reference, the bands of the pass@k and fast_p@k curves, and the report's measured times
(:func:`measured_median`, :func:`ratio_of_medians`: a reference's median time over the samples it was
measured beside, and the ratio of two such medians). Pure numpy and seeded: the same rows always
give the same intervals.

The resampling: each problem's samples are drawn with replacement, as many as it has, from its
own samples; the problems are held fixed (the benchmark is the benchmark: what varies is which
samples a model happened to draw). A group's statistic is recomputed on each of
:data:`RESAMPLES` such draws, made by ``numpy.random.default_rng(SEED)`` afresh for every group
(so a group's interval does not depend on which other groups were scored), and the interval is
the percentile bootstrap's: the 2.5th and 97.5th percentiles of the draws (:data:`LEVEL` = 95 %).
Draws in which a statistic is undefined (no correct, timed sample was drawn) are left out of its
percentiles. All samples equal gives a zero-width interval.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from statistics import NormalDist
from typing import Sequence

import numpy as np

RESAMPLES = 1000
SEED = 0
LEVEL = 0.95


def wilson(p: float, n_eff: float, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a proportion p observed over n_eff trials (z = 1.96: 95 %).
    Never of zero width, and within [0, 1]; (NaN, NaN) when p is NaN or n_eff is not positive."""
    if math.isnan(p) or not n_eff > 0:
        return math.nan, math.nan
    z2n = z * z / n_eff
    centre = (p + z2n / 2) / (1 + z2n)
    half = z / (1 + z2n) * math.sqrt(p * (1 - p) / n_eff + z2n / (4 * n_eff))
    # exactly 0 (1) at p = 0 (1): the formula's rounding would leave 1e-17 over
    return (0.0 if p <= 0 else max(0.0, centre - half)), (1.0 if p >= 1 else min(1.0, centre + half))


def effective_n(p: float, se: float, n_max: float) -> float:
    """Kish's effective sample size of a rate p with standard error se: the number of binomial trials
    with that variance, p(1 - p) / se², at most ``n_max`` (the trials observed); ``n_max`` where se
    says nothing (0 or NaN) or p is 0 or 1, so an interval is never narrower than a binomial's."""
    if 0 < p < 1 and se > 0:  # False for NaN
        return min(p * (1 - p) / se ** 2, n_max)
    return n_max


@dataclass(frozen=True)
class Resamples:
    """Draws of one group's samples, which lie problem after problem (``sizes[i]`` of problem i)."""

    index: np.ndarray  # (draws, samples): positions into the group's samples, each within its problem
    weight: np.ndarray  # (samples,) 1 / (P n_i): ``x[index] @ weight`` is the mean over problems of each's mean
    sizes: tuple[int, ...] = ()  # n_i of each problem (those with a sample), in order

    @property
    def draws(self) -> int:
        return self.index.shape[0]


def resample(sizes: Sequence[int], resamples: int = RESAMPLES, seed: int = SEED) -> Resamples:
    """``resamples`` draws of a group whose problems have ``sizes`` samples each (stratified)."""
    rng = np.random.default_rng(seed)
    sizes = [int(n) for n in sizes if n > 0]
    offsets = np.cumsum([0, *sizes[:-1]]).astype(int)
    columns = [off + rng.integers(0, n, size=(resamples, n)) for off, n in zip(offsets, sizes)]
    index = np.concatenate(columns, axis=1) if columns else np.zeros((resamples, 0), dtype=int)
    weight = np.concatenate([np.full(n, 1.0 / (len(sizes) * n)) for n in sizes]) if sizes else np.zeros(0)
    return Resamples(index, weight, tuple(sizes))


def share(r: Resamples, success: np.ndarray) -> np.ndarray:
    """Per draw: the mean over problems of each problem's share of successes (fast_p@1, pass@1)."""
    return np.asarray(success, dtype=float)[r.index] @ r.weight


def pooled_share(r: Resamples, success: np.ndarray, counted: np.ndarray) -> np.ndarray:
    """Per draw: the drawn successes over the drawn ``counted`` samples, pooled over problems (the
    share of correct, timed samples faster than the reference); NaN where a draw counts none."""
    hits = (np.asarray(success, dtype=bool) & np.asarray(counted, dtype=bool))[r.index].sum(axis=1)
    total = np.asarray(counted, dtype=bool)[r.index].sum(axis=1)
    return np.where(total > 0, hits / np.maximum(total, 1), np.nan)


def counts(r: Resamples, success: np.ndarray) -> np.ndarray:
    """Per draw and problem: how many of the problem's drawn samples are successes, (draws, problems)
    integers (what :func:`pkb_ray.results.metrics.pass_at_k` takes as c, each problem's n being ``r.sizes[i]``)."""
    drawn = np.asarray(success, dtype=bool)[r.index]
    if not r.sizes:
        return np.zeros((r.draws, 0), dtype=int)
    starts = np.cumsum([0, *r.sizes[:-1]])
    return np.add.reduceat(drawn.astype(np.int64), starts, axis=1)


def _positive(values) -> np.ndarray:
    """The values as floats, NaN where not finite and positive (None included)."""
    v = np.array([np.nan if x is None else x for x in values], dtype=float)
    return np.where(np.isfinite(v) & (v > 0), v, np.nan)


def log_geomean(r: Resamples, values: np.ndarray) -> np.ndarray:
    """Per draw: the log of the geometric mean of the drawn positive values, pooled over problems
    (NaN/None/non-positive values are not counted; NaN where a draw has none)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a draw without any value: NaN
        return np.nanmean(np.log(_positive(values))[r.index], axis=1)


def median(r: Resamples, values: np.ndarray) -> np.ndarray:
    """Per draw: the median of the drawn positive values, pooled over problems (as :func:`log_geomean`)."""
    return median_of(_positive(values)[r.index])


def drawn_speedups(r: Resamples, speedups, log_spread=None, seed: int = SEED + 2) -> np.ndarray:
    """(draws, samples): each draw's samples' speedups (NaN where none). With ``log_spread`` (each
    sample's timing noise: the standard deviation of its log speedup over its rounds), every drawn
    sample's speedup is also moved by a factor exp(N(0, spread)) of its own: the second level of a
    hierarchical bootstrap, samples drawn from the run and each sample's time from its rounds."""
    drawn = _positive(speedups)[r.index]
    if log_spread is None:
        return drawn
    spread = np.nan_to_num(np.asarray(log_spread, dtype=float), nan=0.0, posinf=0.0)[r.index]
    return drawn * np.exp(spread * np.random.default_rng(seed).standard_normal(drawn.shape))


def log_spread(lo, hi, level: float = 0.95) -> np.ndarray:
    """A sample's log-speedup standard deviation from its ``level`` interval [lo, hi] (normal on the
    log scale); NaN where it has none."""
    z = NormalDist().inv_cdf(0.5 + level / 2)
    lo, hi = _positive(lo), _positive(hi)
    return (np.log(hi) - np.log(lo)) / (2 * z)


def median_of(drawn: np.ndarray) -> np.ndarray:
    """Per row of ``drawn`` (draws, samples): the median of its finite values; NaN for a row of none."""
    if drawn.shape[1] == 0:  # a group without samples (all refused by the hardware): no median
        return np.full(drawn.shape[0], np.nan)
    drawn = np.sort(np.where(np.isfinite(drawn), drawn, np.inf), axis=1)  # NaN last, as inf
    count = np.isfinite(drawn).sum(axis=1)
    rows = np.arange(len(drawn))
    low, high = drawn[rows, np.maximum(count - 1, 0) // 2], drawn[rows, count // 2 - (count == 0)]
    with np.errstate(invalid="ignore"):  # inf + inf where a draw has no value: NaN below
        middle = np.where(count % 2, low, (low + high) / 2)  # the middle value, or the two middle ones' mean
    return np.where(count > 0, middle, np.nan)


def interval(draws: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """The percentile interval of the defined draws at ``level``; (NaN, NaN) when none is defined."""
    d = np.asarray(draws, dtype=float)
    d = d[np.isfinite(d)]
    if d.size == 0:
        return float("nan"), float("nan")
    lo, hi = np.percentile(d, [50 * (1 - level), 50 * (1 + level)])
    return float(lo), float(hi)


MIN_MEASUREMENTS = 2  # a median of fewer measurements has no spread to resample: no interval


def measured_median(values, seed: int = SEED, level: float = LEVEL) -> tuple[float, float]:
    """The percentile interval of the median of positive measurements (NaN/None dropped), the
    measurements drawn with replacement :data:`RESAMPLES` times; (NaN, NaN) with fewer than
    :data:`MIN_MEASUREMENTS` of them."""
    v = _positive(values)
    v = v[np.isfinite(v)]
    if v.size < MIN_MEASUREMENTS:
        return float("nan"), float("nan")
    return interval(median(resample([v.size], seed=seed), v), level)


def ratio_of_medians(numerator, denominator, level: float = LEVEL) -> tuple[float, float]:
    """The percentile interval of median(numerator) / median(denominator), two independent sets of
    positive measurements each drawn with replacement (seeds 0 and 1); (NaN, NaN) when either has
    fewer than :data:`MIN_MEASUREMENTS`."""
    top, bottom = (_positive(x) for x in (numerator, denominator))
    top, bottom = top[np.isfinite(top)], bottom[np.isfinite(bottom)]
    if min(top.size, bottom.size) < MIN_MEASUREMENTS:
        return float("nan"), float("nan")
    draws = median(resample([top.size], seed=SEED), top) / median(resample([bottom.size], seed=SEED + 1), bottom)
    return interval(draws, level)
