"""``report.html``: one page of a :class:`~pkb_ray.summary.run.RunSummary` (every section of
:mod:`.sections`, figures inline, a block to open for each sample).

A small run's page holds every sample's block (its message, per-rank times and source) and needs
no other file. Above :data:`INLINE_SAMPLES` results or :data:`INLINE_TEXT_BYTES` of sources and
messages, the blocks go to one page per problem, ``sources/<problem>.html`` beside the report,
and the report links there (a grid cell opens its sample in that page): the report itself stays
small (docs/benchmarks/report.md measures it at 5,000 samples).
"""

from __future__ import annotations

import functools
import math
import re
from pathlib import Path
from typing import Callable

import jinja2
import pandas as pd
from markupsafe import Markup

from pkb_ray.spec.names import Status
from pkb_ray.summary import figures
from pkb_ray.summary.run import RunSummary
from pkb_ray.summary.sections import NOTES, OPTIONAL, SECTIONS, fmt, fold, optional
from pkb_ray.summary.tables import GridCell, sample_anchor

INLINE_SAMPLES = 500  # results whose blocks the report holds itself ...
INLINE_TEXT_BYTES = 2_000_000  # ... and their sources and messages, together; above either: sources/
SOURCES = "sources"

Href = Callable[[str], str]  # a sample's anchor -> the link that opens its block


@functools.lru_cache(maxsize=1)
def _templates() -> jinja2.Environment:
    """The page's templates (``templates/*.html.j2`` beside this module), every value escaped."""
    return jinja2.Environment(loader=jinja2.FileSystemLoader(Path(__file__).with_name("templates")),
                              autoescape=True, undefined=jinja2.StrictUndefined)


def _render(template: str, **values) -> str:
    """A fragment of the page (plain text: an SVG figure and a table are joined as strings; a
    template that includes a fragment takes it as ``Markup``)."""
    return _templates().get_template(template).render(**values)


def pages(summary: RunSummary, title: str, stamp: str, inline_samples: int = INLINE_SAMPLES,
          inline_bytes: int = INLINE_TEXT_BYTES, panels: bool = False) -> dict[str, str]:
    """Every file of the report, by path relative to its folder: ``report.html``, and for a large
    run one ``sources/<problem>.html`` per problem; ``stamp`` says when it was made.

    ``panels``: the pages as W&B shows them, each its own media panel (``report`` and
    ``report_sources/<problem>``: :data:`WANDB_SOURCES`), where a link to another page cannot
    resolve: a large run's page then names the panel instead of linking to it."""
    rows = summary.rows
    text = int(rows["source"].fillna("").str.len().sum() + rows["message"].fillna("").str.len().sum())
    if len(rows) <= inline_samples and text <= inline_bytes:
        return {"report.html": page(summary, title, stamp, lambda a: f"#{a}", sample_blocks(rows))}
    files = {pid: f"{SOURCES}/{re.sub(r'[^A-Za-z0-9_.-]', '_', pid)}.html" for pid in rows["problem_id"].unique()}
    where = {sample_anchor(r): files[r["problem_id"]] for r in rows.to_dict("records")}
    href = (lambda a: "") if panels else (lambda a: f"{where.get(a, '')}#{a}")
    out = {"report.html": page(summary, title, stamp, href, source_index(rows, files, panels))}
    for pid, g in rows.groupby("problem_id", sort=True):
        out[files[pid]] = _document(f"{title}: {pid}", f"{len(g)} results of {pid}; generated {stamp}",
                                    "<p><a href='../report.html'>the report</a></p>" + sample_blocks(g))
    return out


def page(summary: RunSummary, title: str, stamp: str, href: Href | None = None, samples: str | None = None) -> str:
    """The report page; ``href`` links a sample's anchor to its block, ``samples`` is the samples
    section (by default, as a small run: every block inline)."""
    href = href or (lambda a: f"#{a}")
    blocks = {
        "leaderboard": html_table(summary.leaderboard),
        "pass-at-k": figures.curves(summary) + html_table(summary.curve_table),  # its problems: what each k is over
        "speedups": figures.speedups(summary) + html_table(summary.speedups),
        "failures": figures.failures(summary) + html_table(summary.failures),
        "problems": html_table(summary.problems, href),
        "grid": grid_html(summary, href),
        "samples": sample_blocks(summary.rows) if samples is None else samples,
        "run": html_table(summary.run),
    }
    sections = dict(SECTIONS)
    for key, table in optional(summary).items():
        sections[key] = OPTIONAL[key]
        blocks[key] = (figures.sizes(table) if key == "sizes" else "") + html_table(table)
    body = _render("sections.html.j2", sections=list(sections.items()), notes=NOTES,
                   blocks={k: Markup(v) for k, v in blocks.items()})  # each made here, escaped already
    return _document(title, f"{summary.description}; generated {stamp}", body)


def _document(title: str, meta: str, body: str) -> str:
    return _templates().get_template("document.html.j2").render(
        title=title, meta=meta, body=Markup(body), css=Markup(CSS), script=Markup(OPEN_TARGET)) + "\n"


# The grid's heat map: a cell's colour is its best correct speedup on a log scale (brown slower than
# the reference, teal faster, full at 1/4x and 4x; light enough for dark text), grey without a
# correct sample; the dark bar along its bottom is the share of samples correct.
SLOW, FAST, NONE = (230, 171, 85), (90, 180, 172), "#e4e7eb"
LEGEND_SPEEDUPS = (0.25, 0.5, 1.0, 2.0, 4.0)


def heat(speedup: float) -> str:
    """The background of a cell whose best correct speedup is ``speedup`` (NaN: none)."""
    if not speedup > 0:
        return NONE
    t = max(-1.0, min(1.0, math.log2(speedup) / 2))
    end = FAST if t > 0 else SLOW
    return "#" + "".join(f"{round(255 + (c - 255) * abs(t)):02x}" for c in end)


def _heat_style(cell: GridCell) -> str:
    return (f"background-color:{heat(cell.best_speedup)};background-size:{cell.correct * 100:.0f}% 4px")


def grid_html(summary: RunSummary, href: Href | None = None) -> str:
    """The models x problems grid as a heat map (:func:`heat`) with its legend; each cell keeps its
    text (share correct / best speedup) and links to the best sample's block."""
    href = href or (lambda a: f"#{a}")
    models = sorted(summary.rows["model"].unique())
    rows = []
    for pid, row in sorted(summary.grid.items()):
        cells = []
        for m in models:
            cell = row.get(m)
            if cell is None:
                cells.append(None)
                continue
            what = f"{m} on {pid}: {grid_share(cell)}" + (
                f", best correct speedup {cell.best_speedup:.2f}x (the maximum of {cell.timed} correct, timed "
                "samples: no interval)" if cell.anchor else ", none correct and timed")
            cells.append({"style": _heat_style(cell), "title": what, "text": cell.text,
                          "link": href(cell.anchor) if cell.anchor else ""})
        rows.append((pid, cells))
    return _render("grid.html.j2", columns=["problem", *models], rows=rows, swatches=legend_swatches())


def grid_share(cell: GridCell) -> str:
    """A cell's share correct as its tooltip says it: ``50% [15%, 85%] of 4 samples correct``."""
    if not cell.samples:
        return "no sample the hardware could run"
    return (f"{cell.correct:.0%} [{cell.correct_lo:.0%}, {cell.correct_hi:.0%}] of {cell.samples} sample(s) correct "
            "(95 % Wilson interval)")


def legend_swatches() -> list[tuple[str, str]]:
    """The grid legend's (colour, label) pairs: the speedups of :data:`LEGEND_SPEEDUPS`, then none."""
    labels = [figures.speedup_label(v) for v in LEGEND_SPEEDUPS]
    labels[0], labels[-1] = f"{labels[0]} or slower", f"{labels[-1]} or faster"
    return [*((heat(v), label) for v, label in zip(LEGEND_SPEEDUPS, labels)), (NONE, "no correct sample")]


LINKS = ("best sample",)  # columns holding the anchor of a sample's block: shown as a link to it


def _cell(column: str, value, href: Href) -> tuple[str, str]:
    """A table cell as (text, link): a sample's anchor opens its block, a URL is its own link."""
    if column in LINKS:  # an empty link (a W&B panel of its own): the anchor as text
        link = href(str(value)) if value else ""
        return ("open", link) if link else (str(value or ""), "")
    if isinstance(value, str) and value.startswith(("https://", "http://")) and " " not in value:
        return value, value  # e.g. the W&B run
    return fmt(value), ""


def html_table(df: pd.DataFrame, href: Href | None = None) -> str:
    if df.empty:
        return _render("table.html.j2", columns=[], rows=[])
    df = fold(df)  # a score's SE or interval beside it: one cell
    href = href or (lambda a: f"#{a}")
    rows = [[_cell(c, v, href) for c, v in zip(df.columns, row)] for row in df.itertuples(index=False)]
    return _render("table.html.j2", columns=[str(c) for c in df.columns], rows=rows)


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
td.heat { background-image: linear-gradient(#1f2933, #1f2933); background-repeat: no-repeat;
          background-position: left bottom; } td.heat a { color: #102a43; }
.legend { font-size: .8rem; color: #3e4c59; } .legend span { margin-right: .9rem; white-space: nowrap; }
.legend i { display: inline-block; width: 1.1rem; height: .8rem; margin-right: .3rem; vertical-align: middle;
            border: 1px solid #cbd2d9; } .legend i.bar { height: 4px; background: #1f2933; border: 0; }
th, td { overflow-wrap: anywhere; } table { max-width: 100%; }
@media print {  /* an A4 page: tables shrink and their cells wrap rather than run off the paper */
  body { margin: 0; padding: 0; max-width: none; } table { font-size: 7pt; width: 100%; }
  th, td { padding: 1px 3px; } thead th { position: static; } pre.src { max-height: none; }
}
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


def sample_blocks(df: pd.DataFrame) -> str:
    """One ``<details id=...>`` per result: status, message, per-rank times, speedup, SOL, round, source."""
    samples = []
    rows = df.sort_values(["model", "problem_id", "sample_index", "world_size"])
    for r in rows.to_dict("records"):
        where = [f"W={int(r['world_size'])}", *(str(r.get(k) or "") for k in ("size", "dtype")),
                 f"round {int(r.get('round', 0) or 0)}"]
        head = (f"{r['model']} / {r['problem_id']} #{int(r['sample_index'])} ({', '.join(filter(None, where))}): "
                f"{r['status']}")
        if pd.notna(r.get("speedup")):
            head += f", {r['speedup']:.3g}x"
        if pd.notna(r.get("sol_fraction")):
            head += f", {r['sol_fraction']:.3g} of SOL"
        message = str(r.get("message", ""))
        samples.append({"anchor": sample_anchor(r), "head": head, "message": message if message.strip() else "",
                        "ranks": _rank_times(r), "source": str(r.get("source", "") or "")})
    return _render("samples.html.j2", samples=samples, rank_columns=["rank", *RANK_COLUMNS.values()])


WANDB_SOURCES = "report_sources"  # W&B's key prefix of a large run's per-problem pages


def wandb_panel(path: str) -> str:
    """The W&B key of a page of :func:`pages`: ``report``, or ``report_sources/<problem>``."""
    return "report" if path == "report.html" else f"{WANDB_SOURCES}/{Path(path).stem}"


def source_index(rows: pd.DataFrame, files: dict[str, str], panels: bool = False) -> str:
    """A large run's samples section: one row per problem linking to the page of its samples'
    blocks (``panels``: naming the W&B panel that shows it)."""
    table = (rows.assign(correct=rows["status"] == Status.CORRECT.value).groupby("problem_id", sort=True)
             .agg(models=("model", "nunique"), results=("status", "size"), correct=("correct", "sum")))
    problems = [{"problem": pid, "models": r.models, "results": r.results, "correct": r.correct, "panel": panels,
                 "page": wandb_panel(files[pid]) if panels else files[pid]} for pid, r in table.iterrows()]
    where = ("in a W&B panel of its own (the panel named here)" if panels else "on a page of its own beside this "
             "report")
    return _render("source_index.html.j2", results=len(rows), where=where, problems=problems)


RANK_COLUMNS = {"ref_median_us": "reference us (median)", "ref_iqr_us": "reference IQR",
                "cand_median_us": "sample us (median)", "cand_iqr_us": "sample IQR"}


def _rank_times(r: dict) -> list[list[tuple[str, str]]]:
    """A result's per-rank medians and interquartile ranges as table rows ([] without any); made
    directly, not through a DataFrame: a large run has thousands (one pandas frame each took 1 ms)."""
    values = [[] if r.get(c) is None or isinstance(r.get(c), float) else list(r[c]) for c in RANK_COLUMNS]
    n = max(map(len, values))
    cell = lambda v, i: fmt(float(v[i])) if i < len(v) and v[i] is not None else "-"  # noqa: E731
    return [[(str(i), ""), *((cell(v, i), "") for v in values)] for i in range(n)]
