"""``report.html``: one self-contained page of a :class:`~pkb_ray.summary.run.RunSummary` (every
section of :mod:`.sections`, figures inline, a block to open for each sample)."""

from __future__ import annotations

import html
import math

import pandas as pd

from pkb_ray.summary import figures
from pkb_ray.summary.run import RunSummary
from pkb_ray.summary.sections import NOTES, OPTIONAL, SECTIONS, fmt, optional
from pkb_ray.summary.tables import sample_anchor


def page(summary: RunSummary, title: str, stamp: str) -> str:
    """The whole page; ``stamp`` says when it was made."""
    blocks = {
        "leaderboard": html_table(summary.leaderboard),
        "pass-at-k": figures.curves(summary),
        "speedups": figures.speedups(summary) + html_table(summary.speedups),
        "failures": figures.failures(summary) + html_table(summary.failures),
        "problems": html_table(summary.problems),
        "grid": grid_html(summary),
        "samples": sample_blocks(summary.rows),
        "run": html_table(summary.run),
    }
    sections = dict(SECTIONS)
    for key, table in optional(summary).items():
        sections[key] = OPTIONAL[key]
        blocks[key] = (figures.sizes(table) if key == "sizes" else "") + html_table(table)
    nav = "".join(f'<a href="#{k}">{v}</a>' for k, v in sections.items())
    body = "".join(f'<section id="{k}"><h2>{sections[k]}</h2><p class="note">{html.escape(NOTES[k])}</p>'
                   f'{blocks[k]}</section>' for k in sections)
    meta = f"{summary.description}; generated {stamp}"
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{CSS}</style><script>{OPEN_TARGET}</script></head><body><h1>{html.escape(title)}</h1>"
            f"<p class='meta'>{html.escape(meta)}</p><nav>{nav}</nav>{body}</body></html>\n")


def grid_html(summary: RunSummary) -> str:
    """The models x problems grid as an HTML table whose cells open the best sample's block."""
    models = sorted(summary.rows["model"].unique())
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in ["problem", *models])
    rows = []
    for pid, row in sorted(summary.grid.items()):
        cells = []
        for m in models:
            text, anchor = row.get(m, ("", ""))
            cells.append(f'<td><a href="#{anchor}">{html.escape(text)}</a></td>' if anchor
                         else f"<td>{html.escape(text)}</td>")
        rows.append(f"<tr><td>{html.escape(pid)}</td>{''.join(cells)}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


LINKS = ("best sample",)  # columns holding the anchor of a sample's block: shown as a link to it


def _cell(column: str, value) -> str:
    if column in LINKS:
        return f'<a href="#{html.escape(str(value))}">open</a>' if value else ""
    if isinstance(value, str) and value.startswith(("https://", "http://")) and " " not in value:
        return f'<a href="{html.escape(value)}">{html.escape(value)}</a>'  # e.g. the W&B run
    return html.escape(fmt(value))


def html_table(df: pd.DataFrame) -> str:
    if df.empty:
        return "<p><em>(none)</em></p>"
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    body = "".join("<tr>" + "".join(f"<td>{_cell(c, v)}</td>" for c, v in zip(df.columns, row)) + "</tr>"
                   for row in df.itertuples(index=False))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, sans-serif; margin: 2rem auto; max-width: 1100px;
       color: #1f2933; padding: 0 1rem; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { margin-top: 2.2rem; border-bottom: 1px solid #e4e7eb; }
.meta, .note { color: #616e7c; font-size: .9rem; } .note { max-width: 80ch; } nav a { margin-right: 1rem; }
table { border-collapse: collapse; font-size: .85rem; margin: .6rem 0; }
th, td { padding: .3rem .6rem; border-bottom: 1px solid #e4e7eb; text-align: right; }
th:first-child, td:first-child, td:nth-child(2) { text-align: left; }
thead th { background: #f5f7fa; position: sticky; top: 0; } svg { max-width: 100%; height: auto; }
details { border-bottom: 1px solid #e4e7eb; padding: .2rem 0; } summary { cursor: pointer; font-size: .9rem; }
pre { background: #f5f7fa; padding: .5rem; overflow-x: auto; font-size: .8rem; } pre.src { max-height: 30rem; }
"""


# A link to a closed <details> scrolls to it but leaves it shut: open whatever block the address names.
OPEN_TARGET = """
function openTarget() {
  const el = document.getElementById(decodeURIComponent(location.hash.slice(1)));
  if (el && el.tagName === "DETAILS") { el.open = true; el.scrollIntoView(); }
}
addEventListener("hashchange", openTarget);
addEventListener("DOMContentLoaded", openTarget);
"""

SAMPLE_LIMIT = 3000  # blocks in one page; the rest are in the Parquet and W&B's samples table


def sample_blocks(df: pd.DataFrame, limit: int = SAMPLE_LIMIT) -> str:
    """One ``<details id=...>`` per result: status, message, per-rank times, speedup, SOL, round, source."""
    out = []
    rows = df.sort_values(["model", "problem_id", "sample_index", "world_size"])
    for _, r in rows.head(limit).iterrows():
        where = [f"W={int(r['world_size'])}", *(str(r.get(k) or "") for k in ("size", "dtype")),
                 f"round {int(r.get('round', 0) or 0)}"]
        head = (f"{r['model']} / {r['problem_id']} #{int(r['sample_index'])} ({', '.join(filter(None, where))}): "
                f"{r['status']}")
        if pd.notna(r.get("speedup")):
            head += f", {r['speedup']:.3g}x"
        if pd.notna(r.get("sol_fraction")):
            head += f", {r['sol_fraction']:.3g} of SOL"
        ranks = _rank_times(r)
        out.append(f'<details id="{sample_anchor(r)}"><summary>{html.escape(head)}</summary>'
                   + (f"<pre>{html.escape(str(r['message']))}</pre>" if str(r.get("message", "")).strip() else "")
                   + (html_table(ranks) if not ranks.empty else "")
                   + f"<pre class='src'>{html.escape(str(r.get('source', '') or ''))}</pre></details>")
    more = len(rows) - limit
    if more > 0:
        out.append(f"<p class='note'>{more} more results are in the Parquet files (not shown here).</p>")
    return "".join(out)


def _rank_times(r) -> pd.DataFrame:
    cols = ("ref_median_us", "ref_iqr_us", "cand_median_us", "cand_iqr_us")
    values = [list(r.get(c)) if r.get(c) is not None and not isinstance(r.get(c), float) else [] for c in cols]
    n = max(map(len, values))
    return pd.DataFrame({"rank": range(n), **{
        name: [v[i] if i < len(v) else math.nan for i in range(n)]
        for name, v in zip(("reference us (median)", "reference IQR", "sample us (median)", "sample IQR"), values)}})
