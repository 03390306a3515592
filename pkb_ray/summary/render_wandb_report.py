"""A W&B Report of one run's :class:`~pkb_ray.summary.run.RunSummary`, laid out like report.html.

The sections of :mod:`pkb_ray.summary.sections`, in the same order and with the same notes; each
shows the same table as the page (Markdown) and, where the run logged one, its W&B table or a bar
chart of its summary, as panels over this run (a run set filtered to its ID). Built with the
``wandb-workspaces`` reports API; :func:`build` touches no network (tests build one), and only
:func:`publish` saves it, for online runs (``wandb.report``).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from pkb_ray.summary import sections
from pkb_ray.summary.render_markdown import markdown_table
from pkb_ray.summary.run import RunSummary

# the W&B table behind each section, as render_wandb logs them
SECTION_TABLES = {"pass-at-k": "pass_at_k", "speedups": "per_category", "problems": "per_problem",
                  "samples": "samples", "sizes": "size_sweeps", "nodes": "across_nodes", "refinement": "rounds"}
HEADLINE_METRICS = ("pass@1", "fast_1.0@1", "geomean_speedup")


def _frames(summary: RunSummary) -> dict[str, pd.DataFrame | None]:
    """The table each section of the page shows (the grid as report.md's text cells, without its links)."""
    return {"leaderboard": summary.leaderboard, "pass-at-k": summary.curve_table, "speedups": summary.speedups,
            "failures": summary.failures, "problems": summary.problems, "grid": summary.grid_table,
            "samples": None,  # thousands of rows: the logged table, not Markdown
            "run": summary.run, **sections.optional(summary)}


def build(summary: RunSummary, entity: str, project: str, run_id: str, title: str) -> Any:
    """The Report's object (not saved): headline bars, then every section the page has."""
    try:
        import wandb_workspaces.reports.v2 as wr
    except ImportError as exc:  # an extra: a run needs it only to publish a Report of an online run
        raise ImportError(f"{exc}: pip install 'pkb_ray[reports]' (wandb-workspaces) for W&B Reports") from None

    def over_run(*panels) -> Any:
        return wr.PanelGrid(runsets=[wr.Runset(entity=entity, project=project, name="this run",
                                               filters=f"Metric(\"ID\") == '{run_id}'")],
                           panels=list(panels))

    blocks: list[Any] = [wr.H1(title), wr.P(summary.timing),
                         over_run(*(wr.BarPlot(title=headline(summary.scalars, m), metrics=[m])
                                    for m in HEADLINE_METRICS if m in summary.scalars))]
    frames = _frames(summary)
    headings = {**sections.SECTIONS, **{k: v for k, v in sections.OPTIONAL.items() if k in frames}}
    for key, heading in headings.items():
        blocks += [wr.H2(heading), wr.P(sections.NOTES.get(key, ""))]
        frame = frames.get(key)
        if frame is not None and not frame.empty:
            blocks.append(wr.MarkdownBlock(markdown_table(frame)))
        if key in SECTION_TABLES:
            blocks.append(over_run(wr.WeavePanelSummaryTable(table_name=SECTION_TABLES[key])))
    return wr.Report(entity=entity, project=project, title=title, description=f"pkb_ray run {run_id}",
                     blocks=blocks)


def headline(scalars: dict[str, Any], metric: str) -> str:
    """A headline bar's title: the metric with its figure and 95 % interval, or standard error where
    it has no interval (``pass@1 0.583 [0.294, 0.825] (95 % Wilson interval)``, ``geomean_speedup 1.2
    [1.05, 1.37] (95 % bootstrap interval)``: a bar panel draws no error bar)."""
    value = scalars[metric]
    if f"{metric}_lo" in scalars and f"{metric}_hi" in scalars:
        shown = sections.with_interval(value, scalars[f"{metric}_lo"], scalars[f"{metric}_hi"])
        kind = "Wilson" if metric.startswith(("pass@", "fast_")) else "bootstrap"  # rates: Wilson (metrics.py)
        return f"{metric} {shown} (95 % {kind} interval)"
    if f"{metric}_se" in scalars:
        return f"{metric} {sections.with_se(value, scalars[f'{metric}_se'])} (± standard error)"
    return f"{metric} {sections.fmt(value)}"


def publish(summary: RunSummary, run: Any, title: str) -> str:
    """Save the Report of an online run; its URL. Where the reports API refuses (no login, no
    network) the run goes on: its HTML page is logged with it anyway."""
    report = build(summary, run.entity, run.project, run.id, title)
    report.save()
    return report.url
