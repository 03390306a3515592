"""The table a run prints: per model and problem, and per model over all its problems."""

from __future__ import annotations

import pandas as pd

from pkb_ray.metrics import fast_col, pass_col
from pkb_ray.names import Status
from pkb_ray.summary.run import RunSummary

SHOWN_KS = (1, 5)  # of the summary's KS: the columns a terminal has room for


def table(summary: RunSummary) -> str:
    if summary.rows.empty:
        return "no results"
    overall = summary.overall.assign(problem_id="ALL")
    rows = pd.concat([summary.per_problem, overall], ignore_index=True)
    statuses = [f"n_{s.value}" for s in Status]
    rows["statuses"] = rows[statuses].apply(
        lambda row: " ".join(f"{name[2:]}={int(v)}" for name, v in row.items() if v), axis=1)
    last = pass_col(SHOWN_KS[-1])  # taken only over problems with that many samples: say how many
    rows[f"{last} over"] = [f"{int(k)}/{int(n)}" for k, n in zip(rows[f"{last}_problems"], rows["problems"])]
    cols = ["model", "problem_id", "n", *map(pass_col, SHOWN_KS), f"{last} over", fast_col(1.0), "median_speedup",
            "statuses"]
    text = rows[cols].to_string(index=False, float_format=lambda x: f"{x:.2f}", na_rep="-")
    return f"{text}\n{summary.timing} (speedups are the reference's time over the sample's, per call)"


def rounds(summary: RunSummary) -> str:
    """pass@1 and fast_1.0@1 after each refinement round ("" without refinement)."""
    if summary.rounds is None:
        return ""
    return "after each refinement round:\n" + summary.rounds.to_string(index=False, float_format=lambda x: f"{x:.3f}")
