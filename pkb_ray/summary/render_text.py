"""The table a run prints: per model and problem, and per model over all its problems, each score
with its 95 % interval (``1.07 [0.95, 1.21]``); then each row's
statuses in a block of their own. Every line fits :data:`WIDTH` columns: long model and problem
names are shortened (the report has them whole)."""

from __future__ import annotations

import textwrap

import pandas as pd

from pkb_ray.results.metrics import fast_col, pass_col
from pkb_ray.spec.names import Status
from pkb_ray.summary.run import PARTIAL_RUN, RunSummary
from pkb_ray.summary.sections import fold, with_interval

SHOWN_KS = (1, 5)  # of the summary's KS: the columns a terminal has room for
WIDTH = 120  # an ordinary terminal
GAP = "  "  # between columns: no cell holds two spaces in a row
NAMES = ("model", "problem")  # shortened, in this order, when a line would be too wide
NOTE = "[lo, hi]: 95 % interval (Wilson for rates, bootstrap for speedups; docs/statistics.md)"


def _two(x) -> str:
    return "-" if pd.isna(x) else f"{x:.2f}"


def table(summary: RunSummary) -> str:
    if summary.rows.empty:
        return "no results"
    rows = summary.table
    last = pass_col(SHOWN_KS[-1])  # taken only over problems with that many samples: say how many
    fast, cells = fast_col(1.0), {}
    cells["model"] = rows["model"].astype(str).tolist()
    cells["problem"] = rows["problem_id"].astype(str).tolist()
    cells["n"] = [str(int(n)) for n in rows["n"]]
    for k in SHOWN_KS:
        cells[pass_col(k)] = [with_interval(*v, _two) for v in
                              zip(rows[pass_col(k)], rows[f"{pass_col(k)}_lo"], rows[f"{pass_col(k)}_hi"])]
    cells[f"{last} over"] = [f"{int(k)}/{int(n)}" for k, n in zip(rows[f"{last}_problems"], rows["problems"])]
    cells[f"{fast} [95%]"] = [with_interval(*v, _two) for v in zip(rows[fast], rows[f"{fast}_lo"], rows[f"{fast}_hi"])]
    cells["median speedup [95%]"] = [with_interval(*v, _two) for v in
                                     zip(rows["median_speedup"], rows["median_speedup_lo"], rows["median_speedup_hi"])]
    lines = fit_columns(cells, WIDTH)
    statuses = [f"n_{s.value}" for s in Status]
    block = ["statuses:"] + [
        textwrap.fill(f"{m}/{p}: " + " ".join(f"{c[2:]}={int(v)}" for c, v in r.items() if v), WIDTH,
                      initial_indent="  ", subsequent_indent="      ")
        for m, p, (_, r) in zip(rows["model"], rows["problem_id"], rows[statuses].iterrows())]
    return "\n".join([*lines, *block, NOTE,
                      f"{summary.timing} (speedups are the reference's time over the sample's, per call)",
                      *([f"{PARTIAL_RUN}: {summary.partial}"] if summary.partial else [])])


def fit_columns(cells: dict[str, list[str]], width: int) -> list[str]:
    """The header and rows, text columns left-aligned and the rest right-aligned, joined by GAP;
    the NAMES columns are cut (ending in '~') until a line fits ``width``."""
    widths = {c: max(len(c), *map(len, v)) for c, v in cells.items()}
    over = sum(widths.values()) + len(GAP) * (len(widths) - 1) - width
    for name in NAMES:
        if over > 0:
            cut = min(over, widths[name] - max(len(name), 8))
            widths[name] -= cut
            over -= cut
    def cell(c: str, text: str) -> str:
        text = text if len(text) <= widths[c] else text[:widths[c] - 1] + "~"
        return text.ljust(widths[c]) if c in NAMES else text.rjust(widths[c])
    rows = zip(*cells.values())
    return [GAP.join(cell(c, c) for c in cells).rstrip()] + [
        GAP.join(cell(c, t) for c, t in zip(cells, row)).rstrip() for row in rows]


def rounds(summary: RunSummary) -> str:
    """pass@1 and fast_1.0@1 after each refinement round ("" without refinement)."""
    if summary.rounds is None:
        return ""
    return "after each refinement round:\n" + fold(summary.rounds).to_string(index=False)
