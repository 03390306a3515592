"""Entry point: ``python -m pkb_ray.sweep [group=option ...]`` (Hydra; ``-m`` for a sweep).

One job: validate the composed config, load the problems, read the samples, start or join Ray,
run the pipeline, write results as Parquet under the job's output folder, print the summary
table, and log the run to W&B (offline by default).
"""

from __future__ import annotations

import logging
import re
import time
from datetime import datetime
from pathlib import Path

import pandas as pd
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from pkb_ray.commands.entry import hydra_main
from pkb_ray.generate.stage import first_round, require_key
from pkb_ray.pipeline.cluster import check_start, join_or_start
from pkb_ray.pipeline.refine import evaluate_and_refine
from pkb_ray.pipeline.selection import JobInputs, job_inputs
from pkb_ray.spec.config import SweepConfig
from pkb_ray.summary.publish import publish
from pkb_ray.summary.tracking import Tracker

log = logging.getLogger("pkb_ray")


def run(cfg: SweepConfig, out_dir: Path, sweep_group: str | None = None, job: str | None = None) -> pd.DataFrame:
    """Run one job end to end; returns the summary table it prints (:attr:`RunSummary.table
    <pkb_ray.summary.run.RunSummary.table>`: per model and problem, and ``ALL`` per model).

    ``sweep_group`` (the sweep's folder name under ``-m``) groups the jobs of one sweep in W&B;
    ``job`` names this job among them (its overrides).
    """
    inputs = job_inputs(cfg, out_dir)  # a config naming what does not exist fails here
    cfg = inputs.cfg
    require_key(cfg)  # a missing API key fails before W&B, any request, and Ray
    # W&B starts next: generation (hours of LLM calls) is logged live, not only what follows it
    tracker = Tracker(cfg.wandb, cfg.model_dump(mode="json"), out_dir, name=run_name(cfg, job), group=sweep_group,
                      job_type=job)
    try:
        if cfg.model.provider == "replay":
            rows = inputs.replayed_rows()
            tracker.use_samples(inputs.samples_path, content_label(cfg))
        else:
            rows = first_round(cfg, inputs.chosen, inputs.generated_dir, tracker.log_generation)
        check_start(cfg)  # Ray itself starts once there is something to evaluate: a finished run's rerun needs none
        log.info("%s -> %s", sample_count(rows, inputs.chosen), inputs.results_dir)
        inputs.make_folders()  # before any gang starts: the rank sandboxes hide them
        return _evaluate_and_report(inputs, rows, out_dir, tracker)
    finally:
        tracker.close()


def _evaluate_and_report(inputs: JobInputs, rows: list, out_dir: Path, tracker: Tracker) -> pd.DataFrame:
    """Pipeline (and refinement rounds), then the summary, the report and W&B, for :func:`run`."""
    cfg, started = inputs.cfg, time.monotonic()

    def progress(metrics, busy: float) -> None:
        tracker.log_progress(metrics.done, metrics.expected, metrics.correct, time.monotonic() - started, busy)

    evaluate_and_refine(rows, cfg, inputs.problems, inputs.chosen, inputs.results_dir, inputs.generated_dir,
                        inputs.problems_dir, on_progress=progress, start=lambda: join_or_start(cfg),
                        on_generation=tracker.log_generation)
    # "partial run": summary.run.PARTIAL_RUN, the key every view marks a capped run by
    info = {"W&B run": tracker.where(), "model": cfg.model.name, "problems": cfg.problems.model_dump(mode="json"),
            "backend": cfg.backend.model_dump(mode="json"), "eval": cfg.eval.model_dump(mode="json"),
            "hardware profile": cfg.hardware.model_dump(mode="json"), "partial run": cfg.model.partial_note}
    # every view below renders this one summary of the folder (this run's rows and those it resumes)
    title = f"{cfg.model.name} on {cfg.hardware.name}"
    summary, page = publish(inputs.results_dir, out_dir, title, run_info={k: v for k, v in info.items() if v})
    tracker.log_results(summary, page, title)
    tracker.log_artifacts({"results": inputs.results_dir, "generated": inputs.generated_dir}, content_label(cfg),
                          artifact_metadata(cfg, sorted({str(r.get("problem_id")) for r in rows})))
    print(where_it_went(inputs.results_dir, out_dir, tracker.where(), has_report=page is not None), flush=True)
    return summary.table


def sample_count(rows: list, chosen) -> str:
    """What the run evaluates: its samples, the problems they are of, and how many of the problems
    it chose have none (a replay set of 8 problems under ``problems=all``)."""
    ids = {r.get("problem_id") for r in rows}
    without = len(set(chosen) - ids)
    return f"{len(rows)} samples of {len(ids)} problems" + (
        f" ({without} of the {len(chosen)} problems chosen have no samples)" if without else "")


def where_it_went(results_dir, out_dir: Path, wandb_run: str | None, has_report: bool) -> str:
    """The run's last lines: where each thing it wrote is."""
    lines = [("results", str(results_dir))]
    if has_report:
        lines += [("report", str(out_dir / "report.html")), ("summary.json", str(out_dir / "summary.json"))]
    if wandb_run:
        lines.append(("W&B run", wandb_run))
    return "\n".join(f"{name + ':':14s}{where}" for name, where in lines)


def artifact_metadata(cfg: SweepConfig, problem_ids: list[str]) -> dict:
    """What subset an Artifact version holds: two runs of one model and problem set name, with other
    problems, backends or a sample cap, are versions of one Artifact and must say how they differ."""
    return {"model": cfg.model.name, "problem_set": cfg.problems.name, "problem_ids": problem_ids,
            "backends": cfg.backend.backends or "all", "limit_per_problem": cfg.model.limit_per_problem,
            "hardware": cfg.hardware.name, "world_sizes": cfg.hardware.world_sizes,
            "sizes": [str(s) for s in cfg.eval.size_specs()]}


def content_label(cfg: SweepConfig) -> str:
    """What a run's Artifacts hold: the model and the problem set (their names version across runs)."""
    return f"{cfg.model.name}-{cfg.problems.name}"


def run_name(cfg: SweepConfig, job: str | None, started: datetime | None = None) -> str:
    """The W&B run's name: model and hardware, the overrides that make this job what it is, and
    when it started (runs of the same job on different days are told apart at a glance)."""
    base = f"{cfg.model.name}-{cfg.hardware.name}"
    if job is None:
        try:
            job = HydraConfig.get().job.override_dirname or None
        except ValueError:  # not under Hydra (a script calling run())
            job = None
    when = (started or datetime.now()).strftime("%Y-%m-%d %H:%M")
    return f"{base} [{job}] {when}" if job else f"{base} {when}"


def sweep_group_name(sweep_dir: Path) -> str:
    """A sweep's W&B group: its folder with the date folder above it (``2026-12-03_10-00-00`` for
    Hydra's ``multirun/2026-12-03/10-00-00``), so sweeps started at the same time of day on two
    days are two groups."""
    parent = sweep_dir.parent.name
    return f"{parent}_{sweep_dir.name}" if re.fullmatch(r"\d{4}-\d{2}-\d{2}", parent) else sweep_dir.name


def sweep_identity() -> tuple[str | None, str | None]:
    """(group, job) of this job when Hydra runs a sweep (-m); (None, None) for a single run."""
    hc = HydraConfig.get()
    if hc.mode != RunMode.MULTIRUN:
        return None, None
    return sweep_group_name(Path(hc.sweep.dir)), hc.job.override_dirname or f"job{hc.job.num}"


main = hydra_main(lambda cfg: run(cfg, Path(cfg.output_dir), *sweep_identity()))


if __name__ == "__main__":
    main()
