"""The report's tables, computed from a run's final rows and its scores (for :mod:`.run` only)."""

from __future__ import annotations

import hashlib
import json
import math
from typing import NamedTuple

import pandas as pd

from pkb_ray.results import intervals

from pkb_ray.results.metrics import fast_col, pass_col
from pkb_ray.results.parquet import RESULT_KEY
from pkb_ray.spec import formats
from pkb_ray.spec.names import Status

CORRECT = Status.CORRECT.value
BEST = "best speedup (max)"  # a maximum of the samples: shown without an interval (docs/statistics.md says why)


def with_bounds(shown: str, frame: pd.DataFrame, column: str) -> dict[str, pd.Series]:
    """``frame[column]`` as the column ``shown``, with its standard error (``<shown>_se``) and
    interval (``<shown>_lo``, ``<shown>_hi``) where ``frame`` has them; the pages fold them into
    one cell, the interval where there is one (:func:`pkb_ray.summary.sections.fold`)."""
    out = {shown: frame[column]}
    for end in ("_se", "_lo", "_hi"):
        if f"{column}{end}" in frame:
            out[f"{shown}{end}"] = frame[f"{column}{end}"]
    return out


def leaderboard(rows: pd.DataFrame, overall: pd.DataFrame) -> pd.DataFrame:
    """One row per model, ranked by fast_1.0@1 then pass@1 (each score with its interval)."""
    board = pd.DataFrame({
        "model": overall["model"],
        "problems": [rows.loc[rows["model"] == m, "problem_id"].nunique() for m in overall["model"]],
        "samples": overall["n"],
        **with_bounds("pass@1", overall, pass_col(1)),
        **with_bounds("fast_1.0@1", overall, fast_col(1.0)),
        **with_bounds("fast_1.5@1", overall, fast_col(1.5)),
        **with_bounds("geomean speedup", overall, "geomean_speedup"),
        **with_bounds("median SOL fraction", overall, "median_sol_fraction"),
    })
    board = board.sort_values(["fast_1.0@1", "pass@1"], ascending=False, na_position="last").reset_index(drop=True)
    board.insert(0, "rank", range(1, len(board) + 1))
    return board


def status_table(rows: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Samples per status (the statuses present, in the taxonomy's order) and in all, per group."""
    counts = rows.groupby(by + ["status"]).size().unstack("status", fill_value=0)
    counts = counts[[s.value for s in Status if s.value in counts.columns]]
    counts["total"] = counts.sum(axis=1)
    return counts.reset_index()


def status_shares(rows: pd.DataFrame) -> pd.DataFrame:
    """Each status's share of each model's samples (index: model)."""
    counts = status_table(rows, ["model"]).set_index("model")
    return counts.drop(columns="total").div(counts["total"], axis=0)


def problems(rows: pd.DataFrame, per_problem: pd.DataFrame) -> pd.DataFrame:
    """Per problem and model: pass@1 (with its standard error and 95 % Wilson interval), the best
    correct sample's speedup, fraction of speed of light and times (with spread), and the anchor of
    its block in the page."""
    scores = per_problem.set_index(["problem_id", "model"])
    out = []
    for (pid, model), g in rows.groupby(["problem_id", "model"], sort=True):
        best = _best(g)
        out.append({"problem": pid, "category": g["category"].iloc[0], "model": model, "samples": len(g),
                    **{f"pass@1{end}": scores.loc[(pid, model), f"{pass_col(1)}{end}"]
                       for end in ("", "_se", "_lo", "_hi")},
                    BEST: best["speedup"] if best is not None else math.nan,
                    "SOL fraction of best": best["sol_fraction"] if best is not None else math.nan,
                    "SOL": {"traced": "estimate (traced)"}.get(best.get("sol_source", ""), "")
                    if best is not None else "",
                    **measured("reference us", g["ref_time_us"] if "ref_time_us" in g else []),
                    "best us": best["cand_time_us"] if best is not None and "cand_time_us" in best else math.nan,
                    "best IQR us": _spread(best, "cand_iqr_us") if best is not None else math.nan,
                    "best sample": sample_anchor(best) if best is not None else ""})
    return pd.DataFrame(out, columns=["problem", "category", "model", "samples", "pass@1", "pass@1_se",
                                      "pass@1_lo", "pass@1_hi", BEST, "SOL fraction of best", "SOL",
                                      "reference us", "reference us_lo", "reference us_hi", "best us",
                                      "best IQR us", "best sample"])


class GridCell(NamedTuple):
    """One model on one problem: its text ("0.50 / 3.00x"), the best sample's anchor ("" without
    one), and the numbers the heat map colours by (best speedup NaN without a correct, timed sample);
    the share's standard error (pass@1's, NaN with one sample), the samples it is over and the
    correct, timed samples the best speedup is the maximum of (a maximum has no interval:
    docs/statistics.md)."""

    text: str
    anchor: str
    correct: float
    best_speedup: float
    correct_lo: float = math.nan  # the share's 95 % Wilson interval (the per-problem pass@1's)
    correct_hi: float = math.nan
    samples: int = 0
    timed: int = 0


def grid_cells(rows: pd.DataFrame, per_problem: pd.DataFrame) -> dict[str, dict[str, GridCell]]:
    """problem -> model -> :class:`GridCell`: the share correct and its interval (``per_problem``'s pass@1,
    so samples the hardware could not run are left out, as there), the best correct speedup and
    that sample's anchor."""
    scores = per_problem.set_index(["problem_id", "model"])
    cells: dict[str, dict[str, GridCell]] = {}
    for (pid, model), g in rows.groupby(["problem_id", "model"], sort=True):
        score = scores.loc[(pid, model)]
        rate, lo, hi = (float(score[f"{pass_col(1)}{end}"]) for end in ("", "_lo", "_hi"))
        best = _best(g)
        text = ("-" if math.isnan(rate) else f"{rate:.2f}") + (f" / {best['speedup']:.2f}x" if best is not None else "")
        timed = int(((g["status"] == CORRECT) & g["speedup"].notna()).sum())
        cells.setdefault(pid, {})[model] = GridCell(
            text, sample_anchor(best) if best is not None else "", 0.0 if math.isnan(rate) else rate,
            float(best["speedup"]) if best is not None else math.nan, lo, hi,
            int(g["status"].ne(Status.UNSUPPORTED_HARDWARE.value).sum()), timed)
    return cells


def grid_table(cells: dict[str, dict[str, GridCell]], models: list[str]) -> pd.DataFrame:
    """The grid as text, one row per problem: each model's cell and, beside it (``<model> share 95 %``),
    the Wilson interval of its share correct ("" where the model has no sample of the problem)."""
    out = []
    for pid, row in sorted(cells.items()):
        line = {"problem": pid}
        for m in models:
            cell = row.get(m)
            line[m] = cell.text if cell else ""
            line[f"{m} share 95 %"] = (f"[{cell.correct_lo:.2f}, {cell.correct_hi:.2f}]"
                                       if cell and not math.isnan(cell.correct_lo) else "")
        out.append(line)
    return pd.DataFrame(out, columns=["problem", *(c for m in models for c in (m, f"{m} share 95 %"))])


def curve_table(curves: pd.DataFrame) -> pd.DataFrame:
    """The curves as the pages' table: per model and k, ``pass@k`` and ``fast_1.0@k`` (each metric of
    ``curves`` as ``<metric>@k``), each with its 95 % band (``_lo``, ``_hi``), and the problems each
    point averages (``problems``)."""
    parts = [g.set_index(["model", "k"])[["value", "lo", "hi"]].set_axis(
                 [f"{metric}@k", f"{metric}@k_lo", f"{metric}@k_hi"], axis=1)
             for metric, g in curves.groupby("metric", sort=False)]
    if not parts:
        return pd.DataFrame(columns=["model", "k", "problems"])
    over = curves.drop_duplicates(["model", "k"]).set_index(["model", "k"])["problems"]
    return pd.concat([*parts, over], axis=1).sort_index().reset_index()


def category_speedups(rows: pd.DataFrame, per_category: pd.DataFrame) -> pd.DataFrame:
    """Per category and model with correct samples: how many, their geometric-mean speedup and the
    share of them faster than the reference, each with its 95 % interval (``per_category``'s
    ``geomean_speedup`` and ``faster_share``)."""
    ok = rows[(rows["status"] == CORRECT) & (rows["speedup"] > 0)]
    shown = {"geomean speedup": "geomean_speedup", "faster than reference": "faster_share"}
    columns = ["category", "model", "correct", *(f"{c}{end}" for c in shown for end in ("", "_lo", "_hi"))]
    if ok.empty:
        return pd.DataFrame(columns=columns)
    g = ok.groupby(["category", "model"])["speedup"]
    scores = per_category.set_index(["category", "model"])
    out = pd.DataFrame({"correct": g.size()})
    for name, column in shown.items():
        for end in ("", "_lo", "_hi"):
            out[f"{name}{end}"] = scores[f"{column}{end}"].reindex(out.index)
    return out.reset_index()[columns]


def across_nodes(scored: pd.DataFrame) -> pd.DataFrame | None:
    """Per model, problem and spread layout: the reference's median time inside one node and across
    nodes and their ratio, each with its 95 % interval over the measurements (the reference is timed
    beside every sample: :func:`pkb_ray.results.intervals.measured_median`, :func:`~pkb_ray.results.intervals.ratio_of_medians`;
    none from fewer than two), and the best correct speedup over each, a maximum (None when no gang
    spanned nodes). ``scored``: every node's rows."""
    nodes = scored["nodes"].fillna(1).astype(int) if "nodes" in scored else pd.Series(1, index=scored.index)
    spread, one = scored[nodes > 1], scored[nodes == 1]
    if spread.empty:
        return None
    out = []
    for (model, pid, w, n), g in spread.assign(nodes=nodes[nodes > 1]).groupby(
            ["model", "problem_id", "world_size", "nodes"], sort=True):
        inside = one[(one["problem_id"] == pid) & (one["world_size"] == w)]
        ref_one, ref_spread = inside["ref_time_us"].median(), g["ref_time_us"].median()
        ratio = ref_spread / ref_one if pd.notna(ref_one) and ref_one > 0 else math.nan
        lo, hi = intervals.ratio_of_medians(g["ref_time_us"], inside["ref_time_us"])
        out.append({
            "model": model, "problem": pid, "layout": f"{n}x{w // n}",
            **measured("ref one node (us)", inside["ref_time_us"]),
            **measured("ref across nodes (us)", g["ref_time_us"]),
            "across / one node": ratio, "across / one node_lo": lo, "across / one node_hi": hi,
            "best speedup, one node": inside.loc[(inside["status"] == CORRECT) & (inside["model"] == model),
                                                 "speedup"].max(),
            "best speedup, across nodes": g.loc[g["status"] == CORRECT, "speedup"].max(),
        })
    return pd.DataFrame(out)


def verdicts(rows: pd.DataFrame, rule: formats.SecondVerdict | None = None) -> pd.DataFrame | None:
    """Per model: samples judged by both rules (``rule``: the second one, by default
    :func:`pkb_ray.spec.formats.second_verdict`), how many each passes, and every sample where they
    disagree (None when no row has the second rule's verdict)."""
    rule = rule or formats.second_verdict()
    if rule is None or rule.column not in rows or rows[rule.column].isna().all():
        return None
    both = rows[rows[rule.column].notna()]
    second_ok = both[rule.column].astype(bool)
    ours_ok = both["status"] == CORRECT
    out = []
    for model, g in both.groupby("model", sort=True):
        p, o = second_ok[g.index], ours_ok[g.index]
        out.append({"model": model, "sample": "(all)", "judged": len(g), rule.passes: int(p.sum()),
                    "pkb_ray_correct": int(o.sum()), "status": "", "why": ""})
        for _, r in g[p != o].sort_values(["problem_id", "sample_index"]).iterrows():
            message = str(r["message"]).strip()
            out.append({"model": model, "sample": f"{r['problem_id']}/{r['sample_index']}", "judged": 1,
                        rule.passes: int(bool(r[rule.column])), "pkb_ray_correct": int(r["status"] == CORRECT),
                        "status": r["status"], "why": message.splitlines()[0][:160] if message else ""})
    return pd.DataFrame(out)


def run_table(rows: pd.DataFrame, run_info: dict | None) -> pd.DataFrame:
    """What the runs were: hardware, versions seen in the rows, and ``run_info`` (the W&B run, the
    config's main keys)."""
    out = [("hardware", ", ".join(sorted(rows["hardware"].astype(str).unique())))]
    if "versions" in rows:
        seen: dict[str, set] = {}
        for versions in rows["versions"].dropna():
            for k, v in (versions.items() if isinstance(versions, dict) else versions):
                seen.setdefault(k, set()).add(str(v))
        out += [(k, ", ".join(sorted(v))) for k, v in sorted(seen.items())]
    for key, value in (run_info or {}).items():
        out.append((key, value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)))
    return pd.DataFrame(out, columns=["what", "value"])


def sample_anchor(row) -> str:
    """The HTML id of a result's block in the samples section: a digest of its whole result key
    (sample keys hold '/' and share long prefixes, so no part of one makes a safe, unique id)."""
    key = "\x1f".join(str(row.get(k, "")) for k in RESULT_KEY)
    return "s-" + hashlib.sha256(key.encode()).hexdigest()[:16]


def measured(shown: str, times) -> dict[str, float]:
    """The median of measured times as the column ``shown``, with its 95 % interval over the
    measurements (``_lo``, ``_hi``: :func:`pkb_ray.results.intervals.measured_median`, NaN from fewer than
    two), as :func:`with_bounds` names them."""
    times = pd.Series(times, dtype=float)
    lo, hi = intervals.measured_median(times)
    return {shown: times.median(), f"{shown}_lo": lo, f"{shown}_hi": hi}


def _best(g: pd.DataFrame):
    """The fastest correct, timed row of a group (None without one)."""
    ok = g[(g["status"] == CORRECT) & g["speedup"].notna()]
    return ok.loc[ok["speedup"].idxmax()] if len(ok) else None


def _spread(row, column: str) -> float:
    """The largest per-rank interquartile range of a row's times (NaN without any)."""
    values = row.get(column) if hasattr(row, "get") else None
    values = [] if values is None else [v for v in values if v is not None and not math.isnan(v)]
    return max(values) if values else math.nan
