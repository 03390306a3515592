"""The summary table a run prints: per problem and overall, from :func:`pkb_ray.metrics.summarize`."""

from __future__ import annotations

import pandas as pd

from pkb_ray.metrics import fast_col, pass_col, summarize, timing_note
from pkb_ray.names import Status

SHOWN_KS = (1, 5)


def summary_frames(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per model and problem, per model) summaries of result rows."""
    return (summarize(df, ["model", "problem_id"], ks=SHOWN_KS),
            summarize(df, ["model"], ks=SHOWN_KS))


def format_summary(df: pd.DataFrame) -> str:
    per_problem, overall = summary_frames(df)
    overall = overall.assign(problem_id="ALL")
    table = pd.concat([per_problem, overall], ignore_index=True)
    statuses = [f"n_{s.value}" for s in Status]
    table["statuses"] = table[statuses].apply(
        lambda row: " ".join(f"{name[2:]}={int(v)}" for name, v in row.items() if v), axis=1)
    last = pass_col(SHOWN_KS[-1])  # taken only over problems with that many samples: say how many
    table[f"{last} over"] = [f"{int(k)}/{int(n)}" for k, n in zip(table[f"{last}_problems"], table["problems"])]
    cols = ["model", "problem_id", "n", pass_col(1), last, f"{last} over", fast_col(1.0), "median_speedup", "statuses"]
    text = table[cols].to_string(index=False, float_format=lambda x: f"{x:.2f}", na_rep="-")
    return f"{text}\n{timing_note(df)} (speedups are the reference's time over the sample's, per call)"
