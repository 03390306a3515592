"""The W&B Report of a run, built (never saved) from real result rows: report.html's sections, in
its order, each with its table, and panels over this run only."""

from __future__ import annotations

import pandas as pd

from pkb_ray.spec.names import Status
from pkb_ray.spec.schema import Result, Sample, results_to_table
from pkb_ray.summary import RunSummary, sections
from pkb_ray.summary.render_wandb_report import build


def _summary() -> RunSummary:
    rows = []
    for pid in ("all_reduce", "broadcast"):
        for i in range(3):
            ok = i < 2
            s = Sample(problem_id=pid, model="m", sample_index=i, source=f"# {pid} {i}\n")
            rows.append(Result.for_sample(s, Status.CORRECT if ok else Status.WRONG_OUTPUT, "", world_size=2,
                                          hardware="h200_2", category="collective",
                                          speedup=1.5 + i if ok else None))
    df = results_to_table(rows).to_pandas()
    return RunSummary.of(df.assign(nodes=df["nodes"].fillna(1).astype(int), round=df["round"].fillna(0).astype(int)))


def _text(block) -> str:
    return str(getattr(block, "text", "") or getattr(block, "markdown", ""))


def test_the_report_has_the_pages_sections_in_order_with_their_tables_over_this_run_only():
    import wandb_workspaces.reports.v2 as wr

    summary = _summary()
    report = build(summary, "team", "pkb_ray", "run123", "m on h200_2")
    assert report.title == "m on h200_2" and report.project == "pkb_ray" and report.entity == "team"
    headings = [_text(b) for b in report.blocks if isinstance(b, wr.H2)]
    assert headings == list(sections.SECTIONS.values())  # this run has none of the optional sections
    grids = [b for b in report.blocks if isinstance(b, wr.PanelGrid)]
    assert grids and all(len(g.runsets) == 1 and g.runsets[0].filters == "Metric(\"ID\") == 'run123'" for g in grids)
    bars = [p.metrics for p in grids[0].panels]
    assert bars == [["pass@1"], ["fast_1.0@1"], ["geomean_speedup"]]
    tables = {p.table_name for g in grids for p in g.panels if isinstance(p, wr.WeavePanelSummaryTable)}
    assert tables == {"pass_at_k", "per_category", "per_problem", "samples"}
    markdown = "\n".join(_text(b) for b in report.blocks if isinstance(b, wr.MarkdownBlock))
    # the leaderboard's and the grid's figures, as the page shows them
    assert "all_reduce" in markdown and "broadcast" in markdown and "| model" in markdown
    leaderboard = summary.leaderboard
    assert isinstance(leaderboard, pd.DataFrame) and str(leaderboard.iloc[0]["model"]) in markdown
