"""Logging a run to Weights & Biases: the resolved config, summary metrics, tables, plots, report.

wandb is imported only when a run is actually logged; mode ``offline`` (the default) writes
the run under the output folder for a later ``wandb sync``; ``disabled`` writes nothing.
Only the driver logs (ranks and actors never touch W&B).

The rows come in as the scores count them (:func:`pkb_ray.metrics.as_scored`: each size of a
size sweep, each world size, is a problem of its own). What one run holds
(:meth:`Tracker.log_results`):

- summary (:func:`run_summary`): the scores of :func:`pkb_ray.metrics.summarize` over all
  models (``pass@1``, ``pass@5``, ``pass@10`` and over how many problems each was taken,
  ``fast_{p}@1``, geometric-mean and median speedup, median fraction of speed of light,
  ``n_{status}``) and per model (``<model>/pass@1``, ...), plus ``fast_1.0@k`` for the same k
  (each over the problems with at least k samples), and ``timing``: which times the speedups
  use (eager calls, graph replays, or how many of each; :func:`pkb_ray.metrics.timing_note`);
- tables: ``samples`` (one row per result: size, message bytes, timing mode and times, error
  trimmed, source), ``per_problem``, ``per_category``, ``pass_at_k`` (the curves, long format),
  and with a size sweep ``size_sweeps`` (the report's "Against message size");
- plots: ``pass@k`` and ``fast_1.0@k`` lines, status counts as bars, the histogram of log2 speedup
  of correct samples, and with a size sweep the best speedup against message bytes;
- ``report``: the HTML page of :mod:`pkb_ray.report`;
- during the run, ``progress/*`` steps (:meth:`Tracker.log_progress`); at the end, the results
  and the generated samples as Artifacts (:meth:`Tracker.log_artifacts`).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pandas as pd

from pkb_ray import size_sweeps
from pkb_ray.config import WandbConfig
from pkb_ray.metrics import curves, status_counts, summarize, timing_note
from pkb_ray.names import Status

SUMMARY_KS = (1, 5, 10)
SAMPLE_COLUMNS = ["problem_id", "category", "model", "sample_index", "backend", "world_size", "size",
                  "message_bytes", "status", "speedup", "timing_mode", "ref_time_us", "cand_time_us", "sol_fraction",
                  "message", "source"]


def run_summary(df: pd.DataFrame) -> dict[str, float]:
    """The run's W&B summary: every metric of :func:`summarize` over all (model, problem) units
    (``pass@1``, ...), the same per model (``<model>/pass@1``, ...), and ``fast_1.0@k``."""
    out: dict[str, float] = {}
    # a scope column groups the rows; (model, problem) stays the unit pass@k is estimated on
    for prefix, frame in [("", df.assign(scope="all"))] + [(f"{m}/", g.assign(scope=m)) for m, g in df.groupby("model")]:
        row = summarize(frame, ["scope"], ks=SUMMARY_KS).drop(columns=["scope"]).iloc[0]
        out.update({f"{prefix}{k}": v for k, v in row.to_dict().items() if pd.notna(v)})
        # like summarize's pass@k: each k over the problems with at least k samples
        wide = curves(frame, ["scope"], ps=(1.0,), same_problems=False)
        for r in wide[(wide["metric"] == "fast_1.0") & wide["k"].isin(SUMMARY_KS)].itertuples():
            out[f"{prefix}fast_1.0@{r.k}"] = r.value
    return out


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
            for key, value in metrics.items():
                self.run.summary[key] = value

    def log_results(self, df: pd.DataFrame, report_html: str | None = None) -> None:
        """Everything a run shows in W&B, from its result rows (see the module docstring)."""
        if not self.run or df.empty:
            return
        import wandb

        self.log_summary({**run_summary(df), "timing": timing_note(df)})
        curve = curves(df, ["model"], ps=(1.0,))  # the plotted curves: the same problems at every k

        samples = df[[c for c in SAMPLE_COLUMNS if c in df]].assign(message=df["message"].str[:300])
        tables = {
            "samples": samples,
            "per_problem": summarize(df, ["model", "problem_id"], ks=SUMMARY_KS),
            "per_category": summarize(df, ["model", "category"], ks=SUMMARY_KS),
            "pass_at_k": curve,
        }
        logged: dict[str, Any] = {name: wandb.Table(dataframe=t.reset_index(drop=True)) for name, t in tables.items()}
        lines = wandb.Table(dataframe=curve.assign(line=curve["model"] + " " + curve["metric"]))
        logged["pass_at_k_plot"] = wandb.plot.line(lines, "k", "value", stroke="line", title="pass@k and fast_1.0@k")
        counts = pd.DataFrame(list(status_counts(df["status"]).items()), columns=["status", "samples"])
        logged["status_plot"] = wandb.plot.bar(wandb.Table(dataframe=counts), "status", "samples",
                                               title="samples by status")
        fast = df[(df["status"] == Status.CORRECT.value) & (df["speedup"] > 0)]["speedup"]
        if len(fast):
            hist = pd.DataFrame({"log2_speedup": [math.log2(s) for s in fast]})
            logged["speedup_plot"] = wandb.plot.histogram(wandb.Table(dataframe=hist), "log2_speedup",
                                                          title="log2 speedup of correct samples")
        logged.update(_size_sweep_logs(df))
        if report_html:
            logged["report"] = wandb.Html(report_html, inject=False)
        self.run.log(logged)

    def log_across_nodes(self, table: pd.DataFrame | None) -> None:
        """The report's "Across nodes" table (:func:`pkb_ray.report.across_nodes`), if gangs spanned nodes."""
        if not self.run or table is None or table.empty:
            return
        import wandb

        self.run.log({"across_nodes": wandb.Table(dataframe=table.reset_index(drop=True))})

    def log_rounds(self, per_round: pd.DataFrame) -> None:
        """pass@1 and fast_1.0@1 after each refinement round: a table, a line plot, and summary keys."""
        if not self.run or per_round.empty:
            return
        import wandb

        single = per_round["model"].nunique() == 1
        for row in per_round.to_dict("records"):
            prefix = f"round{row['round']}" if single else f"{row['model']}/round{row['round']}"
            self.run.summary[f"{prefix}/pass@1"] = row["pass@1"]
            self.run.summary[f"{prefix}/fast_1.0@1"] = row["fast_1.0@1"]
        table = wandb.Table(dataframe=per_round.reset_index(drop=True))
        self.run.log({"rounds": table, "rounds_plot": wandb.plot.line(table, "round", "pass@1", stroke="model",
                                                                       title="pass@1 after each refinement round")})

    def close(self) -> None:
        if self.run:
            self.run.finish()
            self.run = None


def _size_sweep_logs(df: pd.DataFrame) -> dict[str, Any]:
    """The report's "Against message size" table, and best speedup against bytes as a line per
    model and problem (empty when no problem was evaluated at several sizes)."""
    import wandb

    sweep = size_sweeps.table(df)
    if sweep is None:
        return {}
    line = sweep["model"] + " " + sweep["problem"] + " W=" + sweep["W"].astype(str)
    table = wandb.Table(dataframe=sweep.assign(line=line))
    return {"size_sweeps": table,
            "size_sweeps_plot": wandb.plot.line(table, "bytes", "best speedup", stroke="line",
                                                title="best speedup against message bytes (1 = the reference)")}
