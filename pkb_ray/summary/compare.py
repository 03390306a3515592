"""Two runs side by side (``pkb-ray compare A B``): per model and problem, and per model over the
problems both runs have (``ALL``), the change from A to B in pass@1 and fast_1.0@1 (B - A) and in
geomean speedup (B / A), each with a 95 % interval, and which changes are significant regressions.

What is compared: each run's :class:`~pkb_ray.summary.run.RunSummary` rows (each sample's final
version, as the report scores them: a problem's sizes, dtypes and world sizes are problems of their
own). Keys are (model, problem); when each run has one model and they differ, the two models are
compared with each other. Keys one run lacks are listed, not compared. The rates count each run's
runnable samples (not ``unsupported_hardware``); the speedup counts correct, timed samples, over the
problems where both runs have one.

- Interval: percentile bootstrap of the difference (of log speedups for the ratio), each run's
  samples resampled within problems independently (:mod:`pkb_ray.intervals`; seeds 0 and 1,
  :data:`~pkb_ray.intervals.RESAMPLES` draws).
- Test: a stratified permutation test (A/B labels shuffled within each problem, :data:`PERMUTATIONS`
  draws, seed 2), one-sided for "B is worse": p = (1 + #{shuffled <= observed}) / (1 + draws). Exact
  in small samples (one correct sample a side can never be significant), where a bootstrap is not.
- Regression: Holm's step-down rule over every test of the comparison rejects at ``alpha`` (so
  the chance of flagging any regression when none is real stays under ``alpha``), *and* the interval
  lies entirely below 0 (below 1 for the ratio).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from pkb_ray import intervals
from pkb_ray.names import Status
from pkb_ray.summary.run import RunSummary

PERMUTATIONS = 2000
ALPHA = 0.05
ALL = "ALL"  # the row over a model's problems both runs have
METRICS = ("pass@1", "fast_1.0@1", "speedup")  # speedup: geomean B / A
KEY = ["model", "problem_id"]


@dataclass(frozen=True, eq=False)
class Comparison:
    """``table``: one row per compared key (see :func:`compare` for its columns); ``only_a`` and
    ``only_b``: "model / problem" of the keys one run lacks."""

    table: pd.DataFrame
    alpha: float
    only_a: list[str] = field(default_factory=list)
    only_b: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> pd.DataFrame:
        return self.table[self.table["regressed"] != ""]


def _frame(summary: RunSummary) -> pd.DataFrame:
    rows = summary.rows
    runnable = rows[rows["status"] != Status.UNSUPPORTED_HARDWARE.value]
    correct = runnable["status"] == Status.CORRECT.value
    speedup = runnable["speedup"].astype(float)
    return pd.DataFrame({"model": runnable["model"].astype(str), "problem_id": runnable["problem_id"].astype(str),
                         "pass@1": correct.astype(float), "fast_1.0@1": (correct & (speedup > 1.0)).astype(float),
                         "speedup": speedup.where(correct & (speedup > 0))})


def compare(a: RunSummary, b: RunSummary, alpha: float = ALPHA) -> Comparison:
    """Columns of the table: model, problem, ``n A``, ``n B``; per metric m of :data:`METRICS`:
    ``m A``, ``m B``, the change (``Δ m`` for the rates, ``speedup B/A``) with ``_lo``/``_hi``, and
    ``p m`` (NaN where untestable); ``regressed``: the metrics flagged, space-separated."""
    fa, fb = _frame(a), _frame(b)
    if fa["model"].nunique() == 1 and fb["model"].nunique() == 1 and set(fa["model"]) != set(fb["model"]):
        pair = f"{fa['model'].iloc[0]} -> {fb['model'].iloc[0]}"  # one model against another
        fa, fb = fa.assign(model=pair), fb.assign(model=pair)
    keys_a, keys_b = set(map(tuple, fa[KEY].values)), set(map(tuple, fb[KEY].values))
    both = sorted(keys_a & keys_b)
    rows = []
    for model in sorted({m for m, _ in both}):
        problems = [p for m, p in both if m == model]
        rows += [_row(fa, fb, model, [p], p) for p in problems] + [_row(fa, fb, model, problems, ALL)]
    table = pd.DataFrame(rows)
    if len(table):
        _flag(table, alpha)
    name = lambda keys: [f"{m} / {p}" for m, p in sorted(keys)]  # noqa: E731
    return Comparison(table, alpha, name(keys_a - keys_b), name(keys_b - keys_a))


def _row(fa: pd.DataFrame, fb: pd.DataFrame, model: str, problems: list[str], label: str) -> dict:
    ga = [fa[(fa["model"] == model) & (fa["problem_id"] == p)] for p in problems]
    gb = [fb[(fb["model"] == model) & (fb["problem_id"] == p)] for p in problems]
    row = {"model": model, "problem": label, "n A": sum(map(len, ga)), "n B": sum(map(len, gb))}
    for m in ("pass@1", "fast_1.0@1"):
        va, vb = [g[m].to_numpy() for g in ga], [g[m].to_numpy() for g in gb]
        row[f"{m} A"], row[f"{m} B"] = np.mean([v.mean() for v in va]), np.mean([v.mean() for v in vb])
        draws = (intervals.share(intervals.resample(list(map(len, vb)), seed=1), np.concatenate(vb))
                 - intervals.share(intervals.resample(list(map(len, va)), seed=0), np.concatenate(va)))
        row[f"Δ {m}"] = row[f"{m} B"] - row[f"{m} A"]
        row[f"Δ {m}_lo"], row[f"Δ {m}_hi"] = intervals.interval(draws)
        row[f"p {m}"] = _permutation_p(va, vb, pooled=False)
    la = [np.log(g["speedup"].dropna().to_numpy()) for g in ga]
    lb = [np.log(g["speedup"].dropna().to_numpy()) for g in gb]
    timed = [i for i in range(len(problems)) if len(la[i]) and len(lb[i])]  # both runs have a correct, timed one
    la, lb = [la[i] for i in timed], [lb[i] for i in timed]
    if timed:
        row["speedup A"], row["speedup B"] = np.exp(np.concatenate(la).mean()), np.exp(np.concatenate(lb).mean())
        draws = (intervals.log_geomean(intervals.resample(list(map(len, lb)), seed=1), np.exp(np.concatenate(lb)))
                 - intervals.log_geomean(intervals.resample(list(map(len, la)), seed=0), np.exp(np.concatenate(la))))
        row["speedup B/A"] = row["speedup B"] / row["speedup A"]
        row["speedup B/A_lo"], row["speedup B/A_hi"] = np.exp(intervals.interval(draws))
        row["p speedup"] = _permutation_p(la, lb, pooled=True)
    else:
        row.update({c: np.nan for c in ("speedup A", "speedup B", "speedup B/A", "speedup B/A_lo",
                                        "speedup B/A_hi", "p speedup")})
    return row


def _permutation_p(va: list[np.ndarray], vb: list[np.ndarray], pooled: bool) -> float:
    """One-sided p of "B is lower", labels shuffled within each problem. The statistic: the mean over
    problems of each one's B mean - A mean (``pooled``: B's mean - A's mean over all its values)."""
    rng = np.random.default_rng(2)
    total_a, total_b = sum(map(len, va)), sum(map(len, vb))
    observed = np.zeros(1)
    shuffled = np.zeros(PERMUTATIONS)
    for a, b in zip(va, vb):
        values = np.concatenate([a, b])
        order = np.argsort(rng.random((PERMUTATIONS, len(values))), axis=1)
        sum_b = values[order[:, len(a):]].sum(axis=1)
        if pooled:
            shuffled += sum_b / total_b - (values.sum() - sum_b) / total_a
            observed += b.sum() / total_b - a.sum() / total_a
        else:
            shuffled += (sum_b / len(b) - (values.sum() - sum_b) / len(a)) / len(va)
            observed += (b.mean() - a.mean()) / len(va)
    return float((1 + np.sum(shuffled <= observed[0] + 1e-12)) / (1 + PERMUTATIONS))


def _flag(table: pd.DataFrame, alpha: float) -> None:
    """The ``regressed`` column: Holm over every defined p of the table, and the interval below 0."""
    tests = [(i, m, table.at[i, f"p {m}"]) for i in table.index for m in METRICS if pd.notna(table.at[i, f"p {m}"])]
    rejected: set[tuple[int, str]] = set()
    for rank, (i, m, p) in enumerate(sorted(tests, key=lambda t: t[2])):
        if p > alpha / (len(tests) - rank):
            break  # Holm: every larger p is kept too
        rejected.add((i, m))
    below = {"pass@1": lambda i: table.at[i, "Δ pass@1_hi"] < 0, "fast_1.0@1": lambda i: table.at[i, "Δ fast_1.0@1_hi"] < 0,
             "speedup": lambda i: table.at[i, "speedup B/A_hi"] < 1}
    table["regressed"] = [" ".join(m for m in METRICS if (i, m) in rejected and below[m](i)) for i in table.index]
