"""A run's life in Weights & Biases: started with its resolved config, progress while it runs, its
:class:`~pkb_ray.summary.run.RunSummary` at the end (summary, tables, plots and the report, as
:mod:`pkb_ray.summary.render_wandb` renders them), and its folders as Artifacts.

wandb is imported only when a run is actually logged; mode ``offline`` (the default) writes
the run under the output folder for a later ``wandb sync``; ``disabled`` writes nothing.
Only the driver logs (ranks and actors never touch W&B).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pkb_ray.config import WandbConfig
from pkb_ray.summary import render_wandb
from pkb_ray.summary.run import RunSummary


class Tracker:
    def __init__(self, cfg: WandbConfig, run_config: dict[str, Any], run_dir: Path, name: str | None = None,
                 group: str | None = None, job_type: str | None = None):
        self.run = None
        if cfg.mode == "disabled":
            return
        os.environ.setdefault("WANDB_SILENT", "true")
        import wandb

        self.run = wandb.init(project=cfg.project, entity=cfg.entity, group=cfg.group or group, mode=cfg.mode,
                              dir=str(run_dir), config=run_config, name=name, job_type=job_type,
                              tags=cfg.tags or None, reinit="finish_previous")

    def where(self) -> str:
        """The run's page (online), or its folder to ``wandb sync`` (offline); "" when disabled."""
        if not self.run:
            return ""
        return getattr(self.run, "url", None) or f"offline: {self.run.dir}"

    def log_progress(self, done: int, total: int, correct: int, elapsed_s: float, busy_fraction: float) -> None:
        """One history step during the run: results so far, the running share correct (pass@1 of
        one sample per problem is not known until the end), samples/hour, how busy the gangs are."""
        if self.run:
            self.run.log({"progress/results": done, "progress/total": total,
                          "progress/fraction_done": done / total if total else 0.0,
                          "progress/correct_so_far": correct / done if done else 0.0,
                          "progress/samples_per_hour": 3600 * done / elapsed_s if elapsed_s > 0 else 0.0,
                          "progress/gangs_busy": busy_fraction})

    def log_artifacts(self, folders: dict[str, Path]) -> None:
        """Each non-empty folder (results, generated samples) as a W&B Artifact of that type."""
        if not self.run:
            return
        import wandb

        for kind, folder in folders.items():
            if Path(folder).is_dir() and any(Path(folder).rglob("*.parquet")):
                artifact = wandb.Artifact(f"{kind}-{self.run.id}", type=kind)
                artifact.add_dir(str(folder))
                self.run.log_artifact(artifact)

    def log_summary(self, metrics: dict[str, Any]) -> None:
        if self.run:
            self.run.summary.update(metrics)  # one update: a key at a time wrote ~80 records a run

    def log_results(self, summary: RunSummary, report_html: str | None = None) -> None:
        """Everything a run shows in W&B, rendered from its summary (:mod:`pkb_ray.summary.render_wandb`)."""
        if not self.run or summary.rows.empty:
            return
        self.log_summary(render_wandb.summary_keys(summary))
        self.run.log(render_wandb.history(summary, report_html))

    def close(self) -> None:
        if self.run:
            self.run.finish()
            self.run = None

