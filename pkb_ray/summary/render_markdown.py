"""``report.md``: the report's tables as Markdown, for a terminal, a pull request or a wiki (the
samples' blocks and the figures are in ``report.html`` only)."""

from __future__ import annotations

import pandas as pd

from pkb_ray.summary.run import RunSummary
from pkb_ray.summary.sections import NOTES, OPTIONAL, SECTIONS, fmt, fold, optional


def page(summary: RunSummary, title: str, stamp: str) -> str:
    parts = [f"# {title}", "", f"{summary.description}; generated {stamp}", ""]
    tables = {"leaderboard": summary.leaderboard,
              "pass-at-k": summary.curve_table,
              "speedups": summary.speedups, "failures": summary.failures,
              "problems": summary.problems.drop(columns="best sample"), "grid": summary.grid_table}
    for key, table in tables.items():
        parts += [f"## {SECTIONS[key]}", "", NOTES[key], "", markdown_table(table)]
    parts += [f"## {SECTIONS['samples']}", "", "Each result's message, per-rank times and source are in report.html "
              "(a large run's in sources/<problem>.html beside it).", "",
              f"## {SECTIONS['run']}", "", NOTES["run"], "", markdown_table(summary.run)]
    for key, table in optional(summary).items():
        parts += [f"## {OPTIONAL[key]}", "", NOTES[key], "", markdown_table(table)]
    return "\n".join(parts)


def markdown_table(df: pd.DataFrame) -> str:
    if df.empty:
        return "_(none)_\n"
    df = fold(df)  # a score's SE or interval beside it: one cell
    head = "| " + " | ".join(map(str, df.columns)) + " |"
    sep = "| " + " | ".join("---" for _ in df.columns) + " |"
    body = ["| " + " | ".join(fmt(v).replace("|", "/") for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([head, sep, *body]) + "\n"
