"""Runs read back from their ``summary.json`` alone (a CI artifact, a figure shared without its
rows): a leaderboard of their overall rows (``pkb-ray report``) and a comparison of two of them
(``pkb-ray compare``). A run whose result rows are at hand is read from its rows instead.

Without rows there is no pairing and no permutation test, so a comparison is coarser than
:mod:`.compare`'s: a change is a regression only when B's 95 % interval lies wholly below A's
(two intervals that do not overlap) *and* the change is beyond the minimum effect (the same
defaults as :mod:`.compare`). Non-overlap of two 95 % intervals is a stricter test than one at
5 % (about 0.6 % for two equal, normal intervals), so this flags less, never more, than the rows would.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from pkb_ray.results.storage import Folder
from pkb_ray.summary.render_json import NAME

METRICS = ("pass@1", "fast_1.0@1", "geomean_speedup")  # the ones a stored summary is compared on
Z95 = 1.96


def summary_document(run: Path | str) -> dict[str, Any] | None:
    """The ``summary.json`` of run folder ``run`` (a path or URI); None where it has none. A
    malformed one raises ValueError naming what is wrong."""
    data = Folder.of(run).read_bytes(NAME)
    if data is None:
        return None
    try:
        doc = json.loads(data)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("overall"), list):
        raise ValueError("no 'overall' table: not a pkb_ray summary.json")
    return doc


def interval(row: dict[str, Any], metric: str) -> tuple[float, float]:
    """A metric's 95 % interval from a stored row: its ``_lo``/``_hi``, or +/- 1.96 standard errors
    (summaries written before pass rates had Wilson intervals); NaN where it has neither."""
    lo, hi = row.get(f"{metric}_lo"), row.get(f"{metric}_hi")
    if lo is not None and hi is not None:
        return float(lo), float(hi)
    value, se = row.get(metric), row.get(f"{metric}_se")
    if value is None or se is None:
        return math.nan, math.nan
    return max(0.0, value - Z95 * se), min(1.0, value + Z95 * se)


def leaderboard(docs: dict[str, dict[str, Any]]) -> tuple[pd.DataFrame, str]:
    """One row per run and model from each document's overall table, and a warning ("" when none)
    where the runs scored different problems: without rows they cannot be cut to the common ones."""
    rows = []
    for run, doc in docs.items():
        for r in doc["overall"]:
            row = {"run": run, "model": r.get("model"), "n": r.get("n"), "problems": r.get("problems")}
            for m in METRICS:
                lo, hi = interval(r, m)
                row.update({m: r.get(m), f"{m}_lo": lo, f"{m}_hi": hi})
            rows.append(row)
    sets = {run: frozenset(p.get("problem_id") for p in doc.get("per_problem") or []) for run, doc in docs.items()}
    differ = len(set(sets.values())) > 1
    note = ("the runs scored different problems and summary.json holds no rows to cut them to the common ones: "
            "read their results folders for a comparison on the problems they share") if differ else ""
    return pd.DataFrame(rows), note


@dataclass(frozen=True)
class Change:
    model: str
    metric: str
    a: float
    a_interval: tuple[float, float]
    b: float
    b_interval: tuple[float, float]
    regression: bool
    problems: tuple[Any, Any] = (None, None)  # what A's and B's figure is over (their overall rows' ``problems``)

    @property
    def change(self) -> float:
        """B - A for the rates, B / A for the speedup."""
        if self.metric == "geomean_speedup":
            return self.b / self.a if self.a else math.nan
        return self.b - self.a


def compare(a: dict[str, Any], b: dict[str, Any], min_effect: float, min_speedup_effect: float) -> list[Change]:
    """Each model both summaries hold (or their one model each, where they differ), on :data:`METRICS`."""
    rows_a = {r.get("model"): r for r in a["overall"]}
    rows_b = {r.get("model"): r for r in b["overall"]}
    pairs = [(m, m) for m in rows_a if m in rows_b]
    if not pairs and len(rows_a) == len(rows_b) == 1:
        pairs = [(next(iter(rows_a)), next(iter(rows_b)))]
    out = []
    for ma, mb in pairs:
        for metric in METRICS:
            va, vb = rows_a[ma].get(metric), rows_b[mb].get(metric)
            if va is None or vb is None:
                continue
            ia, ib = interval(rows_a[ma], metric), interval(rows_b[mb], metric)
            beyond = (vb / va < 1 - min_speedup_effect if metric == "geomean_speedup" and va
                      else va - vb > min_effect)
            out.append(Change(ma if ma == mb else f"{ma} -> {mb}", metric, va, ia, vb, ib,
                              regression=bool(beyond and ib[1] < ia[0]),
                              problems=(rows_a[ma].get("problems"), rows_b[mb].get("problems"))))
    return out


def text(changes: list[Change]) -> str:
    """The comparison as a table for a terminal."""
    def show(v: float, i: tuple[float, float]) -> str:
        return f"{v:.3g} [{i[0]:.3g}, {i[1]:.3g}]" if not math.isnan(i[0]) else f"{v:.3g} [n/a]"

    lines = ["from summary.json (no rows: unpaired, a regression where the 95 % intervals do not overlap and "
             "the change is beyond the minimum effect; over: the problems each figure averages, A/B)",
             f"{'model':<24} {'metric':<16} {'over':>7} {'A':<24} {'B':<24} {'change':>8}  verdict"]
    for c in changes:
        change = f"x{c.change:.3f}" if c.metric == "geomean_speedup" else f"{c.change:+.3f}"
        verdict = "REGRESSION" if c.regression else "no regression"
        over = "/".join("?" if n is None else str(int(n)) for n in c.problems)
        lines.append(f"{c.model:<24} {c.metric:<16} {over:>7} {show(c.a, c.a_interval):<24} "
                     f"{show(c.b, c.b_interval):<24} {change:>8}  {verdict}")
    return "\n".join(lines)
