"""Logging a run to Weights & Biases behind a tiny interface (log_summary, log_table, close).

wandb is imported only when a run is actually logged; mode ``offline`` (the default) writes
the run under the output folder for a later ``wandb sync``; ``disabled`` writes nothing.
Only the driver logs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd

from pkb_ray.config import WandbConfig


class Tracker:
    def __init__(self, cfg: WandbConfig, run_config: dict[str, Any], run_dir: Path, name: str | None = None):
        self.run = None
        if cfg.mode == "disabled":
            return
        os.environ.setdefault("WANDB_SILENT", "true")
        import wandb

        self.run = wandb.init(project=cfg.project, entity=cfg.entity, group=cfg.group, mode=cfg.mode,
                              dir=str(run_dir), config=run_config, name=name, reinit="finish_previous")

    @property
    def run_dir(self) -> str | None:
        return self.run.dir if self.run else None

    def log_summary(self, metrics: dict[str, Any]) -> None:
        if self.run:
            for key, value in metrics.items():
                self.run.summary[key] = value

    def log_table(self, name: str, df: pd.DataFrame) -> None:
        if self.run:
            import wandb

            self.run.log({name: wandb.Table(dataframe=df.reset_index(drop=True))})

    def close(self) -> None:
        if self.run:
            self.run.finish()
            self.run = None
