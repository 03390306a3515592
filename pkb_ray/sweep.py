"""Entry point: ``python -m pkb_ray.sweep [group=option ...]`` (Hydra; ``-m`` for a sweep).

One job: validate the composed config, load the problems, read the samples, start or join Ray,
run the pipeline, write results as Parquet under the job's output folder, print the summary
table, and log the run to W&B (offline by default).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import hydra
import pandas as pd
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from pkb_ray.cluster import start_ray
from pkb_ray.config import SweepConfig
from pkb_ray.entry import run_job
from pkb_ray.llm import api_key
from pkb_ray.names import Status
from pkb_ray.paths import CONF_DIR
from pkb_ray.pipeline import select_rows
from pkb_ray.problem import load_problems
from pkb_ray.refine import evaluate_and_refine
from pkb_ray.results import newest, read_results
from pkb_ray.samples import read_samples
from pkb_ray.selection import check_against_problems, resolve_path, with_problems_folder
from pkb_ray.stages.generate import first_requests, generate
from pkb_ray.summary import RunSummary, pages, render_text
from pkb_ray.tracking import Tracker

log = logging.getLogger("pkb_ray")


def run(cfg: SweepConfig, out_dir: Path, sweep_group: str | None = None, job: str | None = None) -> pd.DataFrame:
    """Run one job end to end; returns the results as a DataFrame.

    ``sweep_group`` (the sweep's folder name under ``-m``) groups the jobs of one sweep in W&B;
    ``job`` names this job among them (its overrides).
    """
    cfg = with_problems_folder(cfg)
    problems = load_problems(resolve_path(cfg.problems_dir) if cfg.problems_dir else None)
    chosen = check_against_problems(cfg, problems)
    results_dir = resolve_path(cfg.results_dir) if cfg.results_dir else out_dir / "results"
    problems_dir = str(resolve_path(cfg.problems_dir)) if cfg.problems_dir else None
    generated_dir = resolve_path(cfg.generated_dir) if cfg.generated_dir else out_dir / "generated"
    if cfg.model.provider == "replay":
        # all problems: a row naming a problem of none is kept (validate reports it), one of another set is not
        rows = read_samples(resolve_path(cfg.model.samples), cfg.model.name, problems)
        rows = select_rows(rows, cfg, problems)
        start_ray(cfg)
    else:
        api_key(cfg.model)  # a missing key fails here, before any work
        start_ray(cfg)
        rows = generate(first_requests(cfg, chosen), cfg, generated_dir)
    log.info("%d samples of %d problems -> %s", len(rows), len(chosen), results_dir)
    for folder in (results_dir, generated_dir):  # made before any gang starts: the rank sandboxes hide them
        folder.mkdir(parents=True, exist_ok=True)
    tracker = Tracker(cfg.wandb, cfg.model_dump(mode="json"), out_dir, name=run_name(cfg, job), group=sweep_group,
                      job_type=job)
    try:
        df = _evaluate_and_report(cfg, rows, problems, chosen, results_dir, problems_dir, generated_dir, out_dir,
                                  tracker)
    finally:
        tracker.close()
    return df


def _evaluate_and_report(cfg, rows, problems, chosen, results_dir, problems_dir, generated_dir, out_dir,
                         tracker) -> pd.DataFrame:
    """Pipeline (and refinement rounds), then the summary, the report and W&B, for :func:`run`."""
    started = time.monotonic()

    def progress(metrics, busy: float) -> None:
        tracker.log_progress(metrics.done, metrics.expected, metrics.statuses[Status.CORRECT.value], time.monotonic() - started,
                             busy)

    evaluate_and_refine(rows, cfg, problems, chosen, results_dir, generated_dir, problems_dir, on_progress=progress)
    info = {"W&B run": tracker.where(), "model": cfg.model.name, "problems": cfg.problems.model_dump(mode="json"),
            "backend": cfg.backend.model_dump(mode="json"), "eval": cfg.eval.model_dump(mode="json"),
            "hardware profile": cfg.hardware.model_dump(mode="json")}
    # this run's rows and those of the runs it resumes; every view below renders this one summary
    summary = RunSummary.of(newest(read_results(results_dir)), run_info={k: v for k, v in info.items() if v})
    print(render_text.table(summary), flush=True)
    if summary.rounds is not None:
        print(render_text.rounds(summary), flush=True)
    page = None
    if len(summary.rows):
        html_path, md_path = pages.write(summary, out_dir, title=f"{cfg.model.name} on {cfg.hardware.name}")
        page = html_path.read_text()
        log.info("report: %s (and %s)", html_path, md_path.name)
    tracker.log_results(summary, page)
    tracker.log_artifacts({"results": results_dir, "generated": generated_dir})
    return summary.rows


def run_name(cfg: SweepConfig, job: str | None) -> str:
    """The W&B run's name: model and hardware, and the overrides that make this job what it is."""
    base = f"{cfg.model.name}-{cfg.hardware.name}"
    if job is None:
        try:
            job = HydraConfig.get().job.override_dirname or None
        except ValueError:  # not under Hydra (a script calling run())
            job = None
    return f"{base} [{job}]" if job else base


def sweep_identity() -> tuple[str | None, str | None]:
    """(group, job) of this job when Hydra runs a sweep (-m); (None, None) for a single run."""
    hc = HydraConfig.get()
    if hc.mode != RunMode.MULTIRUN:
        return None, None
    return Path(hc.sweep.dir).name, hc.job.override_dirname or f"job{hc.job.num}"


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def main(raw: DictConfig) -> None:
    run_job(raw, lambda cfg: run(cfg, Path(cfg.output_dir), *sweep_identity()))


if __name__ == "__main__":
    main()
