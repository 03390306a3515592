"""A :class:`~pkb_ray.summary.compare.Comparison` as the printed table (fits 120 columns) and as
``compare.md`` and ``compare.html``."""

from __future__ import annotations

import html
import textwrap
from pathlib import Path

import pandas as pd

from pkb_ray.summary.compare import ALL, PAIRED, UNPAIRED, Comparison
from pkb_ray.summary.render_html import CSS, html_table
from pkb_ray.summary.render_markdown import markdown_table
from pkb_ray.summary.render_text import WIDTH, fit_columns
from pkb_ray.summary.sections import with_interval

CHANGES = ("Δ pass@1", "Δ fast_1.0@1", "speedup B/A")  # the columns the printed table shows


def _note(c: Comparison) -> str:
    return (f"Δ: B - A; speedup B/A: ratio of geomean speedups, over the samples correct and timed in both runs "
            f"(test paired: both runs evaluated the same sources, each sample compared with itself) or over the "
            f"problems both runs have a correct, timed sample of (unpaired: other sources); [lo, hi]: 95 % bootstrap "
            f"interval. Regressed: a one-sided permutation test (paired: signs flipped; unpaired: labels shuffled, "
            f"within problems) rejected at alpha={c.alpha} by gatekeeping (the ALL rows share alpha; a model's "
            f"per-problem rows are tested only under its rejected ALL row), and the whole interval beyond the "
            f"minimum effect (a drop of more than {c.min_effect:g} in a rate, a slowdown of more than "
            f"{100 * c.min_speedup_effect:g} %); a smaller change is no change. See docs/statistics.md.")


def tests_used(c: Comparison) -> str:
    """Which test each model's rows had, in one line."""
    t = c.table.drop_duplicates("model")
    return "test: " + "; ".join(f"{m} {test} ({_WHY[test]})" for m, test in zip(t["model"], t["test"]))


_WHY = {PAIRED: "both runs evaluated the same sources", UNPAIRED: "the runs' sources differ"}


def verdict(c: Comparison) -> str:
    n = len(c.regressions)
    return (f"{n} significant regression(s)" if n else
            f"no change beyond the minimum effect ({c.min_effect:g} in a rate, {100 * c.min_speedup_effect:g} % in "
            f"speedup): no regression")


def text(c: Comparison) -> str:
    t = c.table
    if t.empty:
        return "nothing to compare: the runs share no (model, problem)"
    cells = {"model": t["model"].tolist(),
             "problem": [f"{p} ({n} problems)" if p == ALL else p for p, n in zip(t["problem"], t["problems"])],
             "n A/B": [f"{a}/{b}" for a, b in zip(t["n A"], t["n B"])]}
    for column in CHANGES:
        show = _ratio if column == "speedup B/A" else _signed
        cells[f"{column} [95%]"] = [with_interval(v, lo, hi, show) for v, lo, hi in
                                    zip(t[column], t[f"{column}_lo"], t[f"{column}_hi"])]
    cells["regressed"] = t["regressed"].tolist()
    lines = fit_columns(cells, WIDTH)
    for side, keys in (("A", c.only_a), ("B", c.only_b)):
        if keys:
            lines.append(f"only in {side} (not compared): {len(keys)}: " + ", ".join(keys)[:WIDTH - 40])
    return "\n".join([*lines, *textwrap.wrap(counted(c), WIDTH, subsequent_indent="  "),
                      *textwrap.wrap(tests_used(c), WIDTH, subsequent_indent="  "), verdict(c)])


def counted(c: Comparison) -> str:
    """What ``n A/B`` counts, and the samples left out (never run on this hardware) where there are any."""
    out = "n A/B: the samples compared; [n/a]: a change from fewer than 2 samples has no interval"
    t = c.table[(c.table["problem"] != ALL) & ((c.table["not run A"] > 0) | (c.table["not run B"] > 0))]
    if len(t):
        out += ("; not compared, never run (unsupported_hardware), A/B: "
                + ", ".join(f"{m} / {p} {a}/{b}" if c.table["model"].nunique() > 1 else f"{p} {a}/{b}"
                            for m, p, a, b in zip(t["model"], t["problem"], t["not run A"], t["not run B"])))
    return out


def _signed(x) -> str:
    return "-" if pd.isna(x) else f"{x:+.2f}"


def _ratio(x) -> str:
    return "-" if pd.isna(x) else f"{x:.2f}"


def markdown(c: Comparison, a: str, b: str) -> str:
    parts = [f"# Comparison: {b} against {a}", "", _note(c), "", f"**{verdict(c)}**", ""]
    parts += [tests_used(c), "", markdown_table(c.table)] if len(c.table) else [markdown_table(c.table)]
    for side, keys in (("A", c.only_a), ("B", c.only_b)):
        if keys:
            parts += [f"Only in {side} (not compared): " + ", ".join(keys), ""]
    return "\n".join(parts)


def page(c: Comparison, a: str, b: str) -> str:
    only = "".join(f"<p class='note'>Only in {side} (not compared): {html.escape(', '.join(keys))}</p>"
                   for side, keys in (("A", c.only_a), ("B", c.only_b)) if keys)
    title = f"Comparison: {b} against {a}"
    used = f"<p class='note'>{html.escape(tests_used(c))}</p>" if len(c.table) else ""
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1><p class='note'>{html.escape(_note(c))}</p>"
            f"<p><strong>{html.escape(verdict(c))}</strong></p>{used}{html_table(c.table)}{only}</body></html>\n")


def write(c: Comparison, out_dir: Path, a: str, b: str) -> tuple[Path, Path]:
    """``compare.html`` and ``compare.md`` in ``out_dir``; returns their paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "compare.html").write_text(page(c, a, b))
    (out_dir / "compare.md").write_text(markdown(c, a, b))
    return out_dir / "compare.html", out_dir / "compare.md"
