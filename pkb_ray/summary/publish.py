"""What a job does with its results at the end: one :class:`~pkb_ray.summary.run.RunSummary` of its
results folder (this run's rows and those of the runs it resumes), printed, and written as
``report.html`` and ``report.md`` beside the run. W&B gets the same object (``Tracker.log_results``)."""

from __future__ import annotations

import logging
from pathlib import Path

from pkb_ray.results import newest, read_results
from pkb_ray.summary import pages, render_text
from pkb_ray.summary.run import RunSummary

log = logging.getLogger("pkb_ray")


def publish(results_dir: Path, out_dir: Path, title: str, run_info: dict | None = None) -> tuple[RunSummary, str | None]:
    """The summary of ``results_dir``'s newest rows, printed and written under ``out_dir``; with the
    report page's HTML (None when there are no rows)."""
    summary = RunSummary.of(newest(read_results(results_dir)), run_info=run_info)
    print(render_text.table(summary), flush=True)
    if summary.rounds is not None:
        print(render_text.rounds(summary), flush=True)
    if not len(summary.rows):
        return summary, None
    html_path, md_path = pages.write(summary, out_dir, title=title)
    log.info("report: %s (and %s)", html_path, md_path.name)
    return summary, html_path.read_text()
