"""The one object every view of a run renders: :class:`RunSummary`, built from the run's rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from pkb_ray.results.metrics import (as_scored, curves, fast_col, fast_p_curve, final_and_rounds, pass_col, summarize,
                                     timing_note)
from pkb_ray.spec.names import Status
from pkb_ray.summary import sizes, tables

KS = (1, 5, 10)  # the k of every pass@k any view shows
CURVE_P = 1.0  # the fast_p whose curve is drawn beside pass@k
PARTIAL_RUN = "partial run"  # the run_info key of a sample cap (ModelConfig.partial_note): every view says so


@dataclass(frozen=True, eq=False)  # frames do not compare as values
class RunSummary:
    """Everything shown of one run (or of several read together). ``rows``: each sample's latest
    version on one node, as the scores count them (:func:`pkb_ray.results.metrics.as_scored`: each size,
    dtype and world size of a problem is a problem of its own)."""

    rows: pd.DataFrame
    rounds: pd.DataFrame | None  # pass@1 and fast_1.0@1 after each refinement round (None: no refinement)
    overall: pd.DataFrame  # summarize() per model, at KS
    per_problem: pd.DataFrame  # per model and problem
    per_category: pd.DataFrame  # per model and category
    curves: pd.DataFrame  # pass@k and fast_1.0@k per model, the same problems at every k, with SE and 95 % band
    curve_table: pd.DataFrame  # the curves as the pages show them: per model and k, each score with its band
    thresholds: pd.DataFrame  # fast_p@1 per model against p (metrics.CURVE_THRESHOLDS), with its 95 % interval
    scalars: dict[str, Any]  # the headline figures, flat: over all models ("pass@1") and each ("<model>/pass@1")
    leaderboard: pd.DataFrame
    problems: pd.DataFrame  # per problem and model: best sample, its times and fraction of speed of light
    grid: dict[str, dict[str, tables.GridCell]]  # problem -> model -> share correct (and SE), best speedup, its anchor
    grid_table: pd.DataFrame  # the grid as the Markdown pages show it: each model's cells and their SE
    speedups: pd.DataFrame  # per category and model, correct samples
    failures: pd.DataFrame  # statuses per model and category
    status_shares: pd.DataFrame  # each status's share of each model's samples
    statuses: dict[str, int]  # samples per status, every status
    correct_speedups: list[float]  # of every correct, timed sample
    across_nodes: pd.DataFrame | None  # the same samples inside one node and across nodes
    sizes: pd.DataFrame | None  # problems measured at several sizes
    verdicts: pd.DataFrame | None  # a second rule beside ours (pkb_ray.spec.formats.second_verdict)
    run: pd.DataFrame  # hardware, versions, and what the caller adds (config, the W&B run)
    timing: str  # which times the speedups use
    partial: str | None = None  # why not every sample was evaluated (model.limit_per_problem); None: all were

    @classmethod
    def of(cls, everything: pd.DataFrame, run_info: dict | None = None) -> "RunSummary":
        """From the newest rows of one or more runs (every round, every node)."""
        scored = as_scored(everything)
        rows, rounds = final_and_rounds(scored)
        overall = summarize(rows, ["model"], ks=KS)
        per_problem = summarize(rows, ["model", "problem_id"], ks=KS)
        per_category = summarize(rows, ["model", "category"], ks=KS)
        correct = rows[(rows["status"] == Status.CORRECT.value) & (rows["speedup"] > 0)]
        curve = curves(rows, ["model"], ps=(CURVE_P,))
        grid = tables.grid_cells(rows, per_problem)
        return cls(
            rows=rows, rounds=rounds, overall=overall, per_problem=per_problem, per_category=per_category,
            curves=curve, curve_table=tables.curve_table(curve),
            thresholds=fast_p_curve(rows, ["model"]),
            scalars=_scalars(rows, overall),
            leaderboard=tables.leaderboard(rows, overall),
            problems=tables.problems(rows, per_problem),
            grid=grid, grid_table=tables.grid_table(grid, sorted(rows["model"].unique())),
            speedups=tables.category_speedups(rows, per_category),
            failures=tables.status_table(rows, ["model", "category"]),
            status_shares=tables.status_shares(rows),
            statuses={s.value: int((rows["status"] == s.value).sum()) for s in Status},
            correct_speedups=[float(s) for s in correct["speedup"]],
            across_nodes=tables.across_nodes(scored) if len(scored) else None,
            sizes=sizes.table(rows),
            verdicts=tables.verdicts(rows),
            run=tables.run_table(rows, run_info),
            timing=timing_note(rows),
            partial=(run_info or {}).get(PARTIAL_RUN),
        )

    @property
    def table(self) -> pd.DataFrame:
        """The summary table the run prints: per model and problem, then per model over all its
        problems (``problem_id`` ``ALL``), with :func:`~pkb_ray.results.metrics.summarize`'s columns."""
        return pd.concat([self.per_problem, self.overall.assign(problem_id="ALL")], ignore_index=True)

    @property
    def over(self) -> dict[str, str]:
        """What each pass@k and fast_1.0@k of :attr:`scalars` is averaged over, in words: pass@k
        counts only the problems with at least k samples (``pass@10``: "1 of 8 problems (those with
        at least 10 samples)")."""
        out = {}
        for prefix in ["", *(f"{m}/" for m in self.overall["model"])]:
            everything = self.scalars.get(f"{prefix}problems")
            for k in KS:
                n = self.scalars.get(f"{prefix}{pass_col(k)}_problems")
                if n is None or everything is None:
                    continue
                words = f"{n} of {everything} problems" + (f" (those with at least {k} samples)" if k > 1 else "")
                out[f"{prefix}{pass_col(k)}"] = words if n else f"0 of {everything} problems: none has {k} samples"
                if k > 1:
                    out[f"{prefix}{fast_col(CURVE_P).removesuffix('@1')}@{k}"] = out[f"{prefix}{pass_col(k)}"]
        return out

    @property
    def description(self) -> str:
        """One line: how many results, models and problems, the hardware, the timing note."""
        rows = self.rows
        hardware = ", ".join(sorted(rows["hardware"].astype(str).unique()))
        return (f"{len(rows)} results, {rows['model'].nunique()} model(s), {rows['problem_id'].nunique()} problem(s); "
                f"hardware: {hardware}; {self.timing}" + (f"; {PARTIAL_RUN}: {self.partial}" if self.partial else ""))


def _scalars(rows: pd.DataFrame, overall: pd.DataFrame) -> dict[str, Any]:
    """The run's headline figures: every score over all (model, problem) units ("pass@1", ...), the
    same per model ("<model>/pass@1", ...), fast_1.0@k for each k of KS (over the problems with at
    least k samples, as pass@k: ``fast_1.0@k_problems``, as ``pass@k_problems``, says how many)
    with, for k > 1, its standard error ``fast_1.0@k_se`` (pass@k's estimator, so pass@k's: NaN,
    and left out, where a problem has exactly k samples; fast_1.0@1 has its Wilson interval
    ``fast_1.0@1_lo``/``_hi``, as pass@k has ``pass@k_lo``/``_hi``), and the timing note."""
    if rows.empty:
        return {}
    out: dict[str, Any] = {}
    everyone = summarize(rows.assign(scope="all"), ["scope"], ks=KS).drop(columns=["scope"]).iloc[0]
    per_model = [("", everyone.to_dict())] + [(f"{r['model']}/", r) for r in overall.to_dict("records")]
    k_curves = dict(ps=(CURVE_P,), max_k=max(KS), same_problems=False, bootstrap=False)  # their SE only
    wide = {"": curves(rows.assign(model_scope="all"), ["model_scope"], **k_curves)}
    by_model = curves(rows, ["model"], **k_curves)
    for prefix, scores in per_model:
        out.update({f"{prefix}{k}": _count(k, v) for k, v in scores.items() if k != "model" and pd.notna(v)})
        curve = wide[""] if not prefix else by_model[by_model["model"] == prefix[:-1]]
        fast = curve[(curve["metric"] == f"fast_{CURVE_P}") & curve["k"].isin(KS)]
        name = fast_col(CURVE_P).removesuffix("@1")
        out.update({f"{prefix}{name}@{k}": v for k, v in zip(fast["k"], fast["value"])})
        out.update({f"{prefix}{name}@{k}_se": se for k, se in zip(fast["k"], fast["se"]) if k > 1 and pd.notna(se)})
        out.update({f"{prefix}{name}@{k}_problems": int(n) for k, n in zip(fast["k"], fast["problems"]) if k > 1})
    out["timing"] = timing_note(rows)
    return out


def _count(key: str, value: Any) -> Any:
    """A count among the scores (``n``, ``problems``, ``pass@k_problems``, ``n_<status>``) as an int:
    the scores of every model together come as floats."""
    return int(value) if key in ("n", "problems") or key.endswith("_problems") or key.startswith("n_") else value
