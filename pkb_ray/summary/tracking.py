"""A run's life in Weights & Biases: started with its resolved config, progress while it runs, its
:class:`~pkb_ray.summary.run.RunSummary` at the end (summary, tables, plots and the report, as
:mod:`pkb_ray.summary.render_wandb` renders them), and its folders as Artifacts.

wandb is imported only when a run is actually logged; mode ``offline`` (the default) writes
the run under the output folder for a later ``wandb sync``; ``disabled`` writes nothing.
Only the driver logs (ranks and actors never touch W&B).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from pathlib import Path
from typing import Any

from pkb_ray.results.storage import is_remote
from pkb_ray.spec.config import WandbConfig
from pkb_ray.summary import render_wandb, render_wandb_report
from pkb_ray.summary.run import RunSummary

log = logging.getLogger("pkb_ray.summary.tracking")


def artifact_name(kind: str, label: str) -> str:
    """A name that says what an Artifact holds (``results-replay-all``), so each run of the same model
    on the same problems adds a version of one Artifact instead of a new one; W&B allows letters,
    digits, ``-``, ``_`` and ``.``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{kind}-{label}").strip("_")


def folder_digest(path: Path) -> str:
    """sha256 over a file, or a folder's files (relative names and contents, in name order)."""
    path = Path(path)
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(path) if f != path else f.name).encode() + b"\0")
        h.update(f.read_bytes())
    return h.hexdigest()


class Tracker:
    def __init__(self, cfg: WandbConfig, run_config: dict[str, Any], run_dir: Path, name: str | None = None,
                 group: str | None = None, job_type: str | None = None):
        self.run = None
        self.cfg = cfg
        if cfg.mode == "disabled":
            return
        os.environ.setdefault("WANDB_SILENT", "true")
        import wandb

        self.run = wandb.init(project=cfg.project, entity=cfg.entity, group=cfg.group or group, mode=cfg.mode,
                              dir=str(run_dir), config=run_config, name=name, job_type=job_type,
                              tags=cfg.tags or None, reinit="finish_previous")
        self._generated: dict[str, int | float] = {}  # totals of generate() calls finished before the current one
        self._current: Any = None  # the current call's GenerationStats

    def log_generation(self, stats: Any) -> None:
        """One history step while samples are generated (round 0 and refinement rounds): samples,
        errors, tokens and cost so far in this run (:class:`pkb_ray.generate.stage.GenerationStats`)."""
        if not self.run:
            return
        if self._current is not None and stats is not self._current:  # a new generate() call: bank the last
            self._generated = self._totals(self._current, self._generated)
        self._current = stats
        totals = self._totals(stats, self._generated)
        self.run.log({f"generation/{k}": v for k, v in totals.items()})
        self.log_summary({f"generation/{k}": v for k, v in totals.items() if k != "fraction_done"})

    @staticmethod
    def _totals(stats: Any, before: dict[str, int | float]) -> dict[str, int | float]:
        out = {"samples": before.get("samples", 0) + stats.done, "errors": before.get("errors", 0) + stats.errors,
               "prompt_tokens": before.get("prompt_tokens", 0) + stats.prompt_tokens,
               "completion_tokens": before.get("completion_tokens", 0) + stats.completion_tokens,
               "fraction_done": stats.done / stats.total if stats.total else 1.0}
        if stats.cost_usd is not None:
            out["cost_usd"] = before.get("cost_usd", 0.0) + stats.cost_usd
        return out

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

    def log_artifacts(self, folders: dict[str, Path | str], label: str, metadata: dict | None = None) -> None:
        """Each non-empty folder (results, generated samples) as a W&B Artifact of that type, named
        by :func:`artifact_name` (``label``: model and problem set), so reruns add versions; a
        remote one (``s3://...``) as its URI in the summary (``results_uri``) instead. ``metadata``
        (the problems, backends, sample cap, hardware) tells versions of different subsets apart."""
        if not self.run:
            return
        import wandb

        for kind, folder in folders.items():
            if is_remote(folder):  # not copied into W&B: the run says where it is
                self.log_summary({f"{kind}_uri": str(folder)})
                continue
            if Path(folder).is_dir() and any(Path(folder).rglob("*.parquet")):
                artifact = wandb.Artifact(artifact_name(kind, label), type=kind, metadata=metadata or {})
                artifact.add_dir(str(folder))
                self.run.log_artifact(artifact)

    def use_samples(self, path: Path, label: str) -> None:
        """Mark the replayed samples (a folder or file) as this run's input: online, ``use_artifact``
        (W&B links it to the version an earlier generation logged when the content is the same, so
        generated samples -> evaluation -> results is one lineage); offline, where W&B refuses
        ``use_artifact``, the path and its sha256 go into the run's config instead."""
        path = Path(path)
        if not self.run or not path.exists():
            return
        if self.run.offline:
            self.run.config.update({"input_samples": {"path": str(path), "sha256": folder_digest(path),
                                                      "artifact": artifact_name("generated", label)}},
                                   allow_val_change=True)
            return
        import wandb

        artifact = wandb.Artifact(artifact_name("generated", label), type="generated")
        artifact.add_dir(str(path)) if path.is_dir() else artifact.add_file(str(path))
        self.run.use_artifact(artifact)

    def log_summary(self, metrics: dict[str, Any]) -> None:
        if self.run:
            self.run.summary.update(metrics)  # one update: a key at a time wrote ~80 records a run

    def log_results(self, summary: RunSummary, report: dict[str, str] | None = None, title: str = "") -> None:
        """Everything a run shows in W&B, rendered from its summary (:mod:`pkb_ray.summary.render_wandb`),
        and for an online run a W&B Report of it (:mod:`pkb_ray.summary.render_wandb_report`)."""
        if not self.run or summary.rows.empty:
            return
        self.log_summary(render_wandb.summary_keys(summary))
        self.run.log(render_wandb.history(summary, report))
        if self.cfg.report and not self.run.offline:
            try:
                url = render_wandb_report.publish(summary, self.run, title or self.run.name)
            except Exception as exc:  # the reports API (login, network, its version) must not fail a finished run
                log.warning("W&B Report not saved: %s", exc)
            else:
                log.info("W&B Report: %s", url)
                self.run.summary["report_url"] = url

    def close(self) -> None:
        if self.run:
            self.run.finish()
            self.run = None

