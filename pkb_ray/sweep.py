"""Entry point: ``python -m pkb_ray.sweep [group=option ...]`` (Hydra; ``-m`` for a sweep).

One job: validate the composed config, load the problems, read the samples, start or join Ray,
run the pipeline, write results as Parquet under the job's output folder, print the summary
table, and log the run to W&B (offline by default).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pandas as pd
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from pkb_ray.cluster import check_start, join_or_start
from pkb_ray.config import SweepConfig
from pkb_ray.entry import hydra_main
from pkb_ray.refine import evaluate_and_refine
from pkb_ray.selection import JobInputs, job_inputs
from pkb_ray.stages.generate import first_round
from pkb_ray.summary.publish import publish
from pkb_ray.tracking import Tracker

log = logging.getLogger("pkb_ray")


def run(cfg: SweepConfig, out_dir: Path, sweep_group: str | None = None, job: str | None = None) -> pd.DataFrame:
    """Run one job end to end; returns the results as a DataFrame.

    ``sweep_group`` (the sweep's folder name under ``-m``) groups the jobs of one sweep in W&B;
    ``job`` names this job among them (its overrides).
    """
    inputs = job_inputs(cfg, out_dir)  # a config naming what does not exist fails here
    cfg = inputs.cfg
    if cfg.model.provider == "replay":
        rows = inputs.replayed_rows()
    else:  # a missing API key fails before any request, and before Ray starts
        rows = first_round(cfg, inputs.chosen, inputs.generated_dir)
    check_start(cfg)  # Ray itself starts once there is something to evaluate: a finished run's rerun needs none
    log.info("%d samples of %d problems -> %s", len(rows), len(inputs.chosen), inputs.results_dir)
    for folder in (inputs.results_dir, inputs.generated_dir):  # made before any gang starts: the rank sandboxes hide them
        folder.mkdir(parents=True, exist_ok=True)
    tracker = Tracker(cfg.wandb, cfg.model_dump(mode="json"), out_dir, name=run_name(cfg, job), group=sweep_group,
                      job_type=job)
    try:
        return _evaluate_and_report(inputs, rows, out_dir, tracker)
    finally:
        tracker.close()


def _evaluate_and_report(inputs: JobInputs, rows: list, out_dir: Path, tracker: Tracker) -> pd.DataFrame:
    """Pipeline (and refinement rounds), then the summary, the report and W&B, for :func:`run`."""
    cfg, started = inputs.cfg, time.monotonic()

    def progress(metrics, busy: float) -> None:
        tracker.log_progress(metrics.done, metrics.expected, metrics.correct, time.monotonic() - started, busy)

    evaluate_and_refine(rows, cfg, inputs.problems, inputs.chosen, inputs.results_dir, inputs.generated_dir,
                        inputs.problems_dir, on_progress=progress, start=lambda: join_or_start(cfg))
    info = {"W&B run": tracker.where(), "model": cfg.model.name, "problems": cfg.problems.model_dump(mode="json"),
            "backend": cfg.backend.model_dump(mode="json"), "eval": cfg.eval.model_dump(mode="json"),
            "hardware profile": cfg.hardware.model_dump(mode="json")}
    # every view below renders this one summary of the folder (this run's rows and those it resumes)
    summary, page = publish(inputs.results_dir, out_dir, f"{cfg.model.name} on {cfg.hardware.name}",
                            run_info={k: v for k, v in info.items() if v})
    tracker.log_results(summary, page)
    tracker.log_artifacts({"results": inputs.results_dir, "generated": inputs.generated_dir})
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


main = hydra_main(lambda cfg: run(cfg, Path(cfg.output_dir), *sweep_identity()))


if __name__ == "__main__":
    main()
