"""Reference baselines: each problem's PyTorch + NCCL reference timed on a machine, as a table.

    python -m pkb_ray.baselines hardware=h200_2 eval=gpu            # every problem, default size
    python -m pkb_ray.baselines problems=smoke eval.size=small       # on CPU (gloo): a check

Each chosen problem's own reference source is a sample (:func:`reference_sample`, model
``reference``), and these samples go through the run's pipeline like a sweep's
(:func:`pkb_ray.pipeline.wiring.run_pipeline`: validate, compile, the gang pool): each is evaluated on
every gang layout of the hardware profile its problem supports (each world size of
``hardware.world_sizes`` on one node, each ``hardware.spread`` layout over nodes), with the same
timing protocol as samples, on gangs of the Ray cluster (``ray.address``, or a local Ray). Their
result rows are Parquet under ``<run>/results`` (or ``results_dir``) as a sweep's are;
:class:`BaselineSink` turns each into its baseline row as it arrives, with the speed-of-light
time of the hardware profile, the fraction of it the reference reaches and the versions (torch,
NCCL, GPU), and saves it to ``<baselines_dir>/<hardware.name>.json`` at once (merged with rows
already there for other problems, sizes or layouts), so a run cut short keeps what it measured.
:func:`load` reads the table back for reports and ``docs/problems.md``. A cluster without room
for a gang of every layout fails at start, before any measurement: e.g. ``hardware.spread=[2x4]``
needs two nodes, and then gives, for each problem at W=8, the reference across nodes beside the
one inside a node.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pkb_ray.commands.entry import hydra_main
from pkb_ray.pipeline.cluster import start_ray
from pkb_ray.pipeline.selection import job_inputs, resolve_path
from pkb_ray.pipeline.wiring import run_pipeline
from pkb_ray.problem import Problem, sol_time_us
from pkb_ray.spec.config import HardwareConfig, SweepConfig
from pkb_ray.spec.names import Status
from pkb_ray.spec.schema import Result, Sample

log = logging.getLogger("pkb_ray.baselines")
KEY = ("problem_id", "world_size", "nodes", "size", "dtype")


def reference_sample(p: Problem) -> Sample:
    return Sample(problem_id=p.id, model="reference", sample_index=0, source=p.source())


def reference_rows(hardware: HardwareConfig, problems: dict[str, Problem], ids: list[str]) -> list[dict[str, Any]]:
    """The pipeline's sample rows: the reference of each of ``ids`` that some layout of ``hardware`` fits."""
    return [reference_sample(problems[pid]).model_dump() for pid in ids
            if any(problems[pid].meta.world_sizes.supports(lay.world_size) for lay in hardware.layouts)]


def row_for(cfg: SweepConfig, p: Problem, r: Result) -> dict[str, Any]:
    """The baseline row of one evaluation of ``p``'s reference."""
    label, knobs = r.size, p.knobs_of(r.size)
    dtype = r.dtype
    sol = sol_time_us(p, knobs, r.world_size, dtype, cfg.hardware, nodes=r.nodes)
    ok = r.status == Status.CORRECT and r.ref_time_us
    log.info("%s W=%d over %d node(s) %s: %s ref=%s us sol=%.1f us", p.id, r.world_size, r.nodes, label,
             r.status.value, f"{r.ref_time_us:.1f}" if ok else "-", sol)
    return {
        "problem_id": p.id, "category": p.meta.category, "world_size": r.world_size, "nodes": r.nodes,
        "layout": str(r.layout), "size": label, "dtype": dtype,
        "status": r.status.value, "message": "" if ok else r.message[:500],
        "ref_time_us": r.ref_time_us if ok else None,
        "ref_iqr_us": max(r.ref_iqr_us) if ok and r.ref_iqr_us else None,
        "sol_time_us": sol, "sol_fraction": sol / r.ref_time_us if ok else None,
        "hardware": cfg.hardware.name, "versions": r.versions,
        "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


class BaselineSink:
    """The baseline table's sink of a pipeline run (its ``on_result``): each result row becomes its
    baseline row (:func:`row_for`) as it arrives, and, with ``baselines_dir``, is saved to the
    table at once. The pipeline calls it under its lock, one result at a time."""

    def __init__(self, cfg: SweepConfig, problems: dict[str, Problem], baselines_dir: Path | None = None):
        self.cfg, self.problems, self.baselines_dir = cfg, problems, baselines_dir
        self.rows: list[dict[str, Any]] = []

    def add(self, result: Result) -> None:
        row = row_for(self.cfg, self.problems[result.problem_id], result)
        self.rows.append(row)
        if self.baselines_dir is not None:
            save(self.baselines_dir, self.cfg.hardware, [row])


def measure(cfg: SweepConfig, problems: dict[str, Problem], ids: list[str], results_dir: Path,
            baselines_dir: Path | None = None) -> list[dict[str, Any]]:
    """One baseline row per (problem, supported layout, size), the references evaluated through the
    run's pipeline (Ray must be up; the result rows go to ``results_dir``); with ``baselines_dir``,
    each row is saved to the table as soon as it is measured."""
    sink = BaselineSink(cfg, problems, baselines_dir)
    problems_dir = str(resolve_path(cfg.problems_dir)) if cfg.problems_dir else None
    run_pipeline(reference_rows(cfg.hardware, problems, ids), cfg, problems, results_dir, on_result=sink.add,
                 resume=False, problems_dir=problems_dir)
    return sink.rows


def path_for(baselines_dir: Path, hardware_name: str) -> Path:
    return Path(baselines_dir) / f"{hardware_name}.json"


def load(baselines_dir: Path, hardware_name: str) -> list[dict[str, Any]]:
    """The baseline rows recorded for a hardware profile ([] if none)."""
    path = path_for(baselines_dir, hardware_name)
    rows = json.loads(path.read_text())["rows"] if path.exists() else []
    return [{"nodes": 1, **r} for r in rows]  # tables written before layouts: one node


def save(baselines_dir: Path, hardware, rows: list[dict[str, Any]]) -> Path:
    """Merge ``rows`` into the profile's table: a new row replaces the old one with the same key."""
    path = path_for(baselines_dir, hardware.name)
    merged = {tuple(r[k] for k in KEY): r for r in load(baselines_dir, hardware.name)}
    merged.update({tuple(r[k] for k in KEY): r for r in rows})
    table = {"hardware": hardware.model_dump(mode="json"),
             "rows": sorted(merged.values(), key=lambda r: tuple(str(r[k]) for k in KEY))}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(table, indent=1) + "\n")
    tmp.replace(path)  # never a half-written table
    return path


def rescore(baselines_dir: Path, hardware, problems: dict[str, Problem]) -> Path:
    """Recompute the speed-of-light columns of a stored table from ``hardware`` (a profile whose
    bandwidths or peaks changed since the rows were measured); measured times are kept."""
    rows = load(baselines_dir, hardware.name)
    for r in rows:
        p = problems[r["problem_id"]]
        r["sol_time_us"] = sol_time_us(p, p.knobs_of(r["size"]), r["world_size"], r["dtype"], hardware,
                                       nodes=r["nodes"])
        r["sol_fraction"] = r["sol_time_us"] / r["ref_time_us"] if r.get("ref_time_us") else None
    return save(baselines_dir, hardware, rows)


def run(cfg: SweepConfig, out_dir: Path) -> Path:
    inputs = job_inputs(cfg, out_dir)
    cfg, problems, results_dir = inputs.cfg, inputs.problems, inputs.results_dir
    start_ray(cfg)  # a cluster without room for a gang of every layout fails now, before any measurement
    baselines_dir = resolve_path(cfg.baselines_dir)
    if isinstance(results_dir, Path):  # a local one, made before any gang starts: the rank sandboxes hide it
        results_dir.mkdir(parents=True, exist_ok=True)
    rows = measure(cfg, problems, sorted(inputs.chosen), results_dir, baselines_dir)
    failed = [r for r in rows if r["status"] != Status.CORRECT.value]
    print(f"{len(rows) - len(failed)} baselines -> {path_for(baselines_dir, cfg.hardware.name)}" + (
        f"; {len(failed)} failed: " + ", ".join(f"{r['problem_id']} {r['layout']} ({r['status']})" for r in failed)
        if failed else ""), flush=True)
    return path_for(baselines_dir, cfg.hardware.name)


main = hydra_main(lambda cfg: run(cfg, Path(cfg.output_dir)))


if __name__ == "__main__":
    main()
