"""What a job does with its results at the end: one :class:`~pkb_ray.summary.run.RunSummary` of its
results folder (this run's rows and those of the runs it resumes), printed, and written as
``report.html`` and ``report.md`` beside the run (and, for results at a remote URI, a copy under
``<results_dir>/_report/``: the run folder of a Ray job is a temporary copy on the head node). W&B
gets the same object (``Tracker.log_results``)."""

from __future__ import annotations

import logging
from pathlib import Path

from pkb_ray.results.parquet import newest, read_results
from pkb_ray.results.storage import Folder, is_remote
from pkb_ray.summary import pages, render_html, render_json, render_text
from pkb_ray.summary.run import RunSummary

log = logging.getLogger("pkb_ray")
REPORT_BESIDE_RESULTS = "_report"  # under a remote results_dir; readers of the results skip "_" names


def publish(results_dir: Path | str, out_dir: Path, title: str,
            run_info: dict | None = None) -> tuple[RunSummary, dict[str, str] | None]:
    """The summary of ``results_dir``'s newest rows, printed and written under ``out_dir``; with the
    report's pages as W&B shows them (:func:`.render_html.pages` with ``panels``; None when there
    are no rows)."""
    summary = RunSummary.of(newest(read_results(results_dir)), run_info=run_info)
    print(render_text.table(summary), flush=True)
    if summary.rounds is not None:
        print(render_text.rounds(summary), flush=True)
    if not len(summary.rows):
        return summary, None
    stamp = pages.now()
    html_path, md_path = pages.write(summary, out_dir, title=title, stamp=stamp)
    json_path = render_json.write(summary, out_dir, title)
    log.info("report: %s (and %s, %s)", html_path, md_path.name, json_path.name)
    if is_remote(results_dir):
        out_dir = Path(out_dir)
        names = [html_path, md_path, json_path, *(p for p in (out_dir / render_html.SOURCES).rglob("*") if p.is_file())]
        folder = Folder.of(results_dir)
        folder.upload(out_dir, REPORT_BESIDE_RESULTS, [str(p.relative_to(out_dir)) for p in names])
        log.info("report: %s (and report.md)", folder.where(f"{REPORT_BESIDE_RESULTS}/report.html"))
    return summary, render_html.pages(summary, title, stamp, panels=True)
