"""Size sweeps (``eval.sizes``): time and speedup against message size, per problem.

For every problem whose rows span several sizes (at one world size and hardware): each size's
message bytes (one call's inputs on the rank with the most), the reference's median time, and the
best correct sample's time and speedup per model; eager and graph times each where the rows have
them (``eval.timing_mode=both``). :func:`pkb_ray.summary.figures.sizes` draws them against
bytes, as nccl-tests prints its curves; a model's crossover is the size from which its best sample
stops beating the reference.
"""

from __future__ import annotations

import math

import pandas as pd

from pkb_ray.spec.names import Status, TimingMode
from pkb_ray.summary.tables import measured

MODES = (TimingMode.EAGER, TimingMode.GRAPH)
BOUNDS = ("", "_lo", "_hi")  # a reference's median time and its 95 % interval over the samples' measurements
COLUMNS = ["problem", "W", "model", "size", "bytes", "timing", *(f"reference us{e}" for e in BOUNDS), "best us",
           "best speedup", "beats reference",
           *(f"{m} {what}" for m in MODES for what in (*(f"reference us{e}" for e in BOUNDS), "best us"))]


def swept(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of (problem, world size, hardware) groups measured at more than one size."""
    if df.empty or "message_bytes" not in df:
        return df.iloc[0:0]
    df = df.reset_index(drop=True)  # rows read from several files repeat index labels
    base = df["base_problem"] if "base_problem" in df else df["problem_id"]
    sizes = df.assign(_p=base).groupby(["_p", "world_size", "hardware"])["size"].transform("nunique")
    return df.assign(base_problem=base)[(sizes > 1) & df["message_bytes"].notna()]


def table(df: pd.DataFrame) -> pd.DataFrame | None:
    """One row per problem, world size, model and size (None when no problem was swept)."""
    rows_in = swept(df)
    if rows_in.empty:
        return None
    rows = []
    for (pid, w, model, size), g in rows_in.groupby(["base_problem", "world_size", "model", "size"], sort=True):
        ok = g[(g["status"] == Status.CORRECT.value) & g["speedup"].notna()]
        best = ok.loc[ok["speedup"].idxmax()] if len(ok) else None
        row = {"problem": pid, "W": int(w), "model": model, "size": size, "bytes": int(g["message_bytes"].max()),
               "timing": best["timing_mode"] if best is not None and best.get("timing_mode") else "",
               **measured("reference us", g["ref_time_us"]),
               "best us": best["cand_time_us"] if best is not None else math.nan,
               "best speedup": best["speedup"] if best is not None else math.nan,
               "beats reference": "yes" if best is not None and best["speedup"] > 1 else "no"}
        for mode in MODES:
            ref_col, cand_col = f"{mode}_ref_time_us", f"{mode}_cand_time_us"
            row.update(measured(f"{mode} reference us", g[ref_col] if ref_col in g else []))
            row[f"{mode} best us"] = ok[cand_col].min() if cand_col in ok and ok[cand_col].notna().any() else math.nan
        rows.append(row)
    out = pd.DataFrame(rows, columns=COLUMNS).sort_values(["problem", "W", "model", "bytes"]).reset_index(drop=True)
    return out.dropna(axis=1, how="all")


def crossover(curve: pd.DataFrame) -> int | None:
    """The smallest message size from which the best speedup stays at or below 1 after being above it."""
    above = list(curve.sort_values("bytes")[["bytes", "best speedup"]].itertuples(index=False))
    for i in range(1, len(above)):
        if above[i - 1][1] > 1 >= above[i][1] and all(s <= 1 for _, s in above[i:] if not math.isnan(s)):
            return int(above[i][0])
    return None
