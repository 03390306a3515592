"""Two runs side by side (``pkb-ray compare A B``): per model and problem, and per model over the
problems both runs have (``ALL``), the change from A to B in pass@1 and fast_1.0@1 (B - A) and in
geomean speedup (B / A), each with a 95 % interval, and which changes are significant regressions.

What is compared: each run's :class:`~pkb_ray.summary.run.RunSummary` rows (each sample's final
version, as the report scores them: a problem's sizes, dtypes and world sizes are problems of their
own). Keys are (model, problem); when each run has one model and they differ, the two models are
compared with each other. Keys one run lacks are listed, not compared. The rates count each run's
runnable samples: ``unsupported_hardware`` ones were never run, so they are left out and counted
(``not run A``/``B``), which is why ``n`` can be less than the summary's.

Paired or unpaired, per model (the table's ``test`` column says which):

- **paired** when both runs evaluated the same sources: for every problem compared, the two runs
  hold the same samples (sample index and source hash of ``sample_key``, each once), e.g. the same
  generations replayed by a new evaluator version or rescored. Each sample is compared with itself:
  the rates' differences are B's outcome minus A's, sample by sample; the speedup is taken over the
  samples correct and timed in both runs (``speedup A``/``B``: their geomeans; the ratio: the
  geomean of each sample's B / A).
- **unpaired** otherwise (different generations: pairing them by index would be arbitrary). The
  speedup is taken over every correct, timed sample of the problems where both runs have one.

Interval: percentile bootstrap (:mod:`pkb_ray.results.intervals`, :data:`~pkb_ray.results.intervals.RESAMPLES`
draws) of the difference (of log speedups for the ratio). Unpaired: each run's samples resampled
within problems, independently (seeds 0 and 1). Paired (seed 0): the rates' differences resampled
within problems; the speedup's log ratios drawn from all the model's pairs together, as the
geomean pools them: each is one source timed twice, so what varies is the timing, and a problem
with a single pair would otherwise add no spread at all. A change drawn from fewer than
:data:`~pkb_ray.results.metrics.MIN_SAMPLES` samples (pairs; on either side, unpaired) has no
interval (NaN, shown ``n/a``, as the summary shows a speedup of one sample): resampling one value
gives a zero-width interval that says nothing. Such a row is never flagged.

Test, one-sided for "B is worse", its statistic the change the table shows:

- paired: a sign-flip permutation test within problems (under "no change" each sample's A and B
  outcomes are exchangeable, so each difference is as likely with either sign). Exact, over every
  sign pattern, up to :data:`EXACT_PAIRS` non-zero differences; beyond, :data:`PERMUTATIONS`
  random patterns (seed 2). p = share of patterns whose statistic is <= the observed one (random
  patterns: (1 + #) / (1 + draws));
- unpaired: a stratified permutation test, the A/B labels shuffled within each problem
  (:data:`PERMUTATIONS` draws, seed 2), p = (1 + #{shuffled <= observed}) / (1 + draws).

Both are exact in small samples (one correct sample a side can never be significant), where a
bootstrap is not.

Regression: rejected by the gatekeeping procedure below at ``alpha`` *and* the interval lies
entirely beyond the minimum effect: its upper end below -``min_effect`` for the rates (an absolute
share, :data:`MIN_EFFECT`), below 1 - ``min_speedup_effect`` for the speedup ratio
(:data:`MIN_SPEEDUP_EFFECT`). A change smaller than that, however certain, is "no change": the
same code run twice differs by more than its intervals say (a machine's state between runs), as
docs/statistics.md measures. The procedure (:func:`gatekeeping`): one family of the
``ALL`` rows (a hypothesis per model x metric), and under each of them the family of that model's
per-problem rows for that metric. The ``ALL`` hypotheses share ``alpha`` (``alpha / K`` each); a
family of per-problem rows is tested only once its ``ALL`` row is rejected, with the share that
``ALL`` row held, by Holm's rule within the family; a family all rejected hands its share on to the
``ALL`` rows still standing (Holm). This is the graphical procedure of Bretz et al. (2009,
Statistics in Medicine 28:586) with the graph written out in :func:`gatekeeping`; every such graph
is a closed test of weighted Bonferroni tests, so the chance of flagging any regression that is not
real stays under ``alpha`` whichever hypotheses are true (strong family-wise error control). Holm
over every row at once (this module's former rule) spent ``alpha`` on dozens of per-problem tests
that a sample set of 2 to 11 samples per problem can never pass, and so hardly ever flagged an
``ALL`` row either (docs/statistics.md measures both rules); testing each per-problem family at
the whole ``alpha`` after its gate would not control the error: with R ``ALL`` rows rejected, up
to R families could each make a false flag at rate ``alpha``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from pkb_ray.results import intervals
from pkb_ray.results.metrics import MIN_SAMPLES
from pkb_ray.spec.names import Status
from pkb_ray.summary.run import RunSummary

PERMUTATIONS = 2000
EXACT_PAIRS = 16  # paired: up to this many non-zero differences, all 2^m sign patterns
ALPHA = 0.05
MIN_EFFECT = 0.05  # pass@1, fast_1.0@1: a drop of less than 5 points is no regression
MIN_SPEEDUP_EFFECT = 0.10  # geomean speedup B/A: nor is a slowdown of less than 10 % (docs/statistics.md)
EPSILON = 1e-6  # the graph's edge from a per-problem row to the other ALL rows (used once its family is done)
ALL = "ALL"  # the row over a model's problems both runs have
METRICS = ("pass@1", "fast_1.0@1", "speedup")  # speedup: geomean B / A
KEY = ["model", "problem_id"]
PAIRED, UNPAIRED = "paired", "unpaired"
COLUMNS = ["model", "problem", "test", "problems", "n A", "n B", "not run A", "not run B",
           *(f"{c}{end}" for m in METRICS[:2] for c, end in ((m, " A"), (m, " B"), (f"Δ {m}", ""), (f"Δ {m}", "_lo"),
                                                              (f"Δ {m}", "_hi"), (f"p {m}", ""))),
           "speedup A", "speedup B", "speedup B/A", "speedup B/A_lo", "speedup B/A_hi", "p speedup", "regressed"]


@dataclass(frozen=True, eq=False)
class Comparison:
    """``table``: one row per compared key (see :func:`compare` for its columns); ``only_a`` and
    ``only_b``: "model / problem" of the keys one run lacks."""

    table: pd.DataFrame
    alpha: float
    only_a: list[str] = field(default_factory=list)
    only_b: list[str] = field(default_factory=list)
    min_effect: float = MIN_EFFECT
    min_speedup_effect: float = MIN_SPEEDUP_EFFECT

    @property
    def regressions(self) -> pd.DataFrame:
        return self.table[self.table["regressed"] != ""]


def _frame(rows: pd.DataFrame) -> pd.DataFrame:
    runnable = rows[rows["status"] != Status.UNSUPPORTED_HARDWARE.value]
    correct = runnable["status"] == Status.CORRECT.value
    speedup = runnable["speedup"].astype(float)
    keys = runnable["sample_key"].astype(str) if "sample_key" in runnable else pd.Series("", index=runnable.index)
    pair = [f"{i}/{k.rsplit('/', 1)[-1]}" if k else "" for i, k in zip(runnable["sample_index"], keys)]
    return pd.DataFrame({"model": runnable["model"].astype(str), "problem_id": runnable["problem_id"].astype(str),
                         "pair": pair, "pass@1": correct.astype(float),
                         "fast_1.0@1": (correct & (speedup > 1.0)).astype(float),
                         "speedup": speedup.where(correct & (speedup > 0))})


def compare(a: RunSummary | pd.DataFrame, b: RunSummary | pd.DataFrame, alpha: float = ALPHA,
            min_effect: float = MIN_EFFECT, min_speedup_effect: float = MIN_SPEEDUP_EFFECT) -> Comparison:
    """``a`` and ``b``: runs, or their scored final rows (a :class:`RunSummary`'s ``rows``).

    Columns of the table: model, problem, ``test`` (paired or unpaired), ``problems`` (how many the
    row is over: 1, or the model's problems in both runs for ``ALL``), ``n A``, ``n B`` (the samples
    compared), ``not run A``, ``not run B`` (``unsupported_hardware`` samples, left out); per metric
    m of :data:`METRICS`: ``m A``, ``m B``, the change (``Δ m`` for the rates, ``speedup B/A``) with
    ``_lo``/``_hi``, and ``p m`` (NaN where untestable); ``regressed``: the metrics flagged,
    space-separated."""
    ra, rb = (x.rows if isinstance(x, RunSummary) else x for x in (a, b))
    fa, fb = _frame(ra), _frame(rb)
    na, nb = _not_run(ra), _not_run(rb)
    if fa["model"].nunique() == 1 and fb["model"].nunique() == 1 and set(fa["model"]) != set(fb["model"]):
        pair = f"{fa['model'].iloc[0]} -> {fb['model'].iloc[0]}"  # one model against another
        fa, fb = fa.assign(model=pair), fb.assign(model=pair)
        na, nb = ({(pair, p): n for (_, p), n in x.items()} for x in (na, nb))
    keys_a, keys_b = set(map(tuple, fa[KEY].values)), set(map(tuple, fb[KEY].values))
    both = sorted(keys_a & keys_b)
    rows = []
    for model in sorted({m for m, _ in both}):
        problems = [p for m, p in both if m == model]
        ga = [fa[(fa["model"] == model) & (fa["problem_id"] == p)] for p in problems]
        gb = [fb[(fb["model"] == model) & (fb["problem_id"] == p)] for p in problems]
        if _same_samples(ga, gb):
            gb = [y.set_index("pair").loc[x["pair"]].reset_index() for x, y in zip(ga, gb)]  # B in A's order
            row = _paired_row
        else:
            row = _unpaired_row
        rows += [row(model, p, [x], [y]) for p, x, y in zip(problems, ga, gb)] + [row(model, ALL, ga, gb)]
        for r in rows[-len(problems) - 1:]:
            keys = [(model, p) for p in (problems if r["problem"] == ALL else [r["problem"]])]
            r["not run A"], r["not run B"] = sum(na.get(k, 0) for k in keys), sum(nb.get(k, 0) for k in keys)
    table = pd.DataFrame(rows, columns=COLUMNS[:-1])
    if len(table):
        _flag(table, alpha, min_effect, min_speedup_effect)
    else:
        table["regressed"] = []
    name = lambda keys: [f"{m} / {p}" for m, p in sorted(keys)]  # noqa: E731
    return Comparison(table, alpha, name(keys_a - keys_b), name(keys_b - keys_a), min_effect, min_speedup_effect)


def _not_run(rows: pd.DataFrame) -> dict[tuple[str, str], int]:
    """(model, problem) -> its ``unsupported_hardware`` samples: never run, so not compared."""
    never = rows[rows["status"] == Status.UNSUPPORTED_HARDWARE.value]
    return {(str(m), str(p)): len(g) for (m, p), g in never.groupby(["model", "problem_id"])}


def _same_samples(ga: list[pd.DataFrame], gb: list[pd.DataFrame]) -> bool:
    """Whether, problem by problem, both runs hold the same samples (index and source), each once."""
    for x, y in zip(ga, gb):
        px, py = x["pair"], y["pair"]
        if (px == "").any() or px.duplicated().any() or py.duplicated().any() or set(px) != set(py):
            return False
    return True


def _head(model: str, label: str, test: str, ga: list[pd.DataFrame], gb: list[pd.DataFrame]) -> dict:
    row = {"model": model, "problem": label, "test": test, "problems": len(ga),
           "n A": sum(map(len, ga)), "n B": sum(map(len, gb))}
    for m in ("pass@1", "fast_1.0@1"):
        row[f"{m} A"] = np.mean([g[m].to_numpy().mean() for g in ga])
        row[f"{m} B"] = np.mean([g[m].to_numpy().mean() for g in gb])
        row[f"Δ {m}"] = row[f"{m} B"] - row[f"{m} A"]
    return row


def _no_speedup(row: dict) -> dict:
    row.update({c: np.nan for c in ("speedup A", "speedup B", "speedup B/A", "speedup B/A_lo", "speedup B/A_hi",
                                    "p speedup")})
    return row


def _paired_row(model: str, label: str, ga: list[pd.DataFrame], gb: list[pd.DataFrame]) -> dict:
    """``gb[i]`` holds the samples of ``ga[i]``, in the same order."""
    row = _head(model, label, PAIRED, ga, gb)
    sizes = list(map(len, ga))
    weight = np.concatenate([np.full(n, 1.0 / (len(ga) * n)) for n in sizes])  # mean over problems of each's mean
    for m in ("pass@1", "fast_1.0@1"):
        d = np.concatenate([y[m].to_numpy() - x[m].to_numpy() for x, y in zip(ga, gb)])
        draws = intervals.share(intervals.resample(sizes, seed=0), d)
        row[f"Δ {m}_lo"], row[f"Δ {m}_hi"] = _interval_of(len(d), draws)
        row[f"p {m}"] = sign_flip_p(d * weight)
    timed = [(x["speedup"].to_numpy(), y["speedup"].to_numpy()) for x, y in zip(ga, gb)]
    timed = [(sa[ok], sb[ok]) for sa, sb in timed if (ok := np.isfinite(sa) & np.isfinite(sb)).any()]
    if not timed:
        return _no_speedup(row)
    sa, sb = np.concatenate([t[0] for t in timed]), np.concatenate([t[1] for t in timed])
    d = np.log(sb) - np.log(sa)  # pooled over problems, as the geomean pools its samples
    row["speedup A"], row["speedup B"] = np.exp(np.log(sa).mean()), np.exp(np.log(sb).mean())
    row["speedup B/A"] = np.exp(d.mean())
    draws = intervals.log_geomean(intervals.resample([len(d)], seed=0), np.exp(d))  # pairs drawn from all problems
    row["speedup B/A_lo"], row["speedup B/A_hi"] = np.exp(_interval_of(len(d), draws))
    row["p speedup"] = sign_flip_p(d)
    return row


def _unpaired_row(model: str, label: str, ga: list[pd.DataFrame], gb: list[pd.DataFrame]) -> dict:
    row = _head(model, label, UNPAIRED, ga, gb)
    for m in ("pass@1", "fast_1.0@1"):
        va, vb = [g[m].to_numpy() for g in ga], [g[m].to_numpy() for g in gb]
        draws = (intervals.share(intervals.resample(list(map(len, vb)), seed=1), np.concatenate(vb))
                 - intervals.share(intervals.resample(list(map(len, va)), seed=0), np.concatenate(va)))
        row[f"Δ {m}_lo"], row[f"Δ {m}_hi"] = _interval_of(min(row["n A"], row["n B"]), draws)
        row[f"p {m}"] = _permutation_p(va, vb, pooled=False)
    la = [np.log(g["speedup"].dropna().to_numpy()) for g in ga]
    lb = [np.log(g["speedup"].dropna().to_numpy()) for g in gb]
    timed = [i for i in range(len(ga)) if len(la[i]) and len(lb[i])]  # both runs have a correct, timed one
    la, lb = [la[i] for i in timed], [lb[i] for i in timed]
    if not timed:
        return _no_speedup(row)
    row["speedup A"], row["speedup B"] = np.exp(np.concatenate(la).mean()), np.exp(np.concatenate(lb).mean())
    draws = (intervals.log_geomean(intervals.resample(list(map(len, lb)), seed=1), np.exp(np.concatenate(lb)))
             - intervals.log_geomean(intervals.resample(list(map(len, la)), seed=0), np.exp(np.concatenate(la))))
    row["speedup B/A"] = row["speedup B"] / row["speedup A"]
    timed_n = min(sum(map(len, la)), sum(map(len, lb)))
    row["speedup B/A_lo"], row["speedup B/A_hi"] = np.exp(_interval_of(timed_n, draws))
    row["p speedup"] = _permutation_p(la, lb, pooled=True)
    return row


def _interval_of(n: int, draws: np.ndarray) -> tuple[float, float]:
    """The 95 % interval of a change's bootstrap ``draws``, or (NaN, NaN) when they come from fewer
    than MIN_SAMPLES samples: one value resampled has no spread to show."""
    return intervals.interval(draws) if n >= MIN_SAMPLES else (np.nan, np.nan)


def sign_flip_p(contributions: np.ndarray) -> float:
    """One-sided p of "B is lower" of a paired statistic ``sum(contributions)`` (each pair's weighted
    B - A), each contribution's sign flipped at random: exact over all sign patterns up to
    :data:`EXACT_PAIRS` non-zero contributions, else :data:`PERMUTATIONS` random ones (seed 2)."""
    c = np.asarray(contributions, dtype=float)
    c = c[c != 0]  # a zero difference is the same under either sign
    if c.size == 0:
        return 1.0
    observed, tol = c.sum(), 1e-9 * np.abs(c).sum()
    if c.size <= EXACT_PAIRS:
        signs = 1 - 2 * ((np.arange(2 ** c.size)[:, None] >> np.arange(c.size)) & 1)  # every pattern, once
        return float(np.mean(signs @ c <= observed + tol))
    signs = np.random.default_rng(2).choice([-1.0, 1.0], size=(PERMUTATIONS, c.size))
    return float((1 + np.sum(signs @ c <= observed + tol)) / (1 + PERMUTATIONS))


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


def gatekeeping(gates: Sequence[float], families: Sequence[Sequence[float]],
                alpha: float = ALPHA) -> tuple[list[bool], list[list[bool]]]:
    """Which hypotheses are rejected: ``gates[k]`` the p of an ``ALL`` row, ``families[k]`` the p's
    of the per-problem rows under it (NaN: untestable, never rejected; an untestable gate keeps its
    family untested). Strong family-wise error control at ``alpha``.

    The graph (Bretz et al. 2009): each testable gate starts with weight 1 / K (K gates). A gate
    passes its weight to its family's rows, equally; a gate without testable rows, to the other
    gates. A row passes its weight to the other rows of its family (Holm within the family), with
    :data:`EPSILON` of it to the other gates, which becomes all of it once the family is done; a
    family of one row passes it all to the other gates. A hypothesis is rejected while its p <=
    weight x alpha, and each rejection passes on its weight and rewires the graph (their algorithm
    1); which hypotheses end up rejected does not depend on the order."""
    gate_ids = [k for k, p in enumerate(gates) if np.isfinite(p)]
    nodes = [(k, None) for k in gate_ids]
    nodes += [(k, j) for k in gate_ids for j, p in enumerate(families[k]) if np.isfinite(p)]
    index = {node: i for i, node in enumerate(nodes)}
    n = len(nodes)
    p = np.array([gates[k] if j is None else families[k][j] for k, j in nodes], dtype=float)
    w = np.array([1.0 / len(gate_ids) if j is None else 0.0 for _, j in nodes])
    g = np.zeros((n, n))
    for (k, j), i in index.items():
        others = [index[(o, None)] for o in gate_ids if o != k]
        rows = [index[(k, r)] for r in range(len(families[k])) if (k, r) in index]
        if j is None:
            targets = [(rows, 1.0)] if rows else [(others, 1.0)]
        else:
            siblings = [r for r in rows if r != i]
            targets = [(siblings, 1.0 - EPSILON), (others, EPSILON)] if siblings and others else \
                [(siblings, 1.0)] if siblings else [(others, 1.0)]
        for group, share in targets:
            for t in group:
                g[i, t] += share / len(group)
    rejected = np.zeros(n, dtype=bool)
    while True:
        open_ = ~rejected & (w > 0) & (p <= w * alpha * (1 + 1e-12))
        if not open_.any():
            break
        i = int(np.flatnonzero(open_)[np.argmin((p / np.maximum(w, 1e-300))[open_])])
        rejected[i] = True
        w = np.where(rejected, 0.0, w + w[i] * g[i])
        denominator = 1.0 - g[:, i] * g[i, :]
        with np.errstate(divide="ignore", invalid="ignore"):
            g = np.where(denominator[:, None] > 0, (g + np.outer(g[:, i], g[i, :])) / denominator[:, None], 0.0)
        g[:, i] = g[i, :] = 0.0
        np.fill_diagonal(g, 0.0)
    out_gates = [bool(rejected[index[(k, None)]]) if (k, None) in index else False for k in range(len(gates))]
    out_families = [[bool(rejected[index[(k, j)]]) if (k, j) in index else False for j in range(len(f))]
                    for k, f in enumerate(families)]
    return out_gates, out_families


def _flag(table: pd.DataFrame, alpha: float, min_effect: float, min_speedup_effect: float) -> None:
    """The ``regressed`` column: rejected by :func:`gatekeeping` (a gate per model x metric, over its
    ALL row) and the interval beyond the minimum effect (below -min_effect; the ratio's below
    1 - min_speedup_effect)."""
    gates, families, where = [], [], []
    for model in table["model"].unique():
        rows = table.index[table["model"] == model]
        top = [i for i in rows if table.at[i, "problem"] == ALL][0]
        under = [i for i in rows if i != top]
        for m in METRICS:
            gates.append(table.at[top, f"p {m}"])
            families.append([table.at[i, f"p {m}"] for i in under])
            where.append((m, top, under))
    gate_rejected, family_rejected = gatekeeping(np.array(gates, dtype=float),
                                                 [np.array(f, dtype=float) for f in families], alpha)
    rejected = set()
    for (m, top, under), gate, family in zip(where, gate_rejected, family_rejected):
        rejected |= {(top, m)} if gate else set()
        rejected |= {(i, m) for i, r in zip(under, family) if r}
    below = {"pass@1": lambda i: table.at[i, "Δ pass@1_hi"] < -min_effect,
             "fast_1.0@1": lambda i: table.at[i, "Δ fast_1.0@1_hi"] < -min_effect,
             "speedup": lambda i: table.at[i, "speedup B/A_hi"] < 1 - min_speedup_effect}
    table["regressed"] = [" ".join(m for m in METRICS if (i, m) in rejected and below[m](i)) for i in table.index]
