"""Reference baselines: each problem's PyTorch + NCCL reference timed on a machine, as a table.

    python -m pkb_ray.baselines hardware=h200_2 eval=gpu            # every problem, default size
    python -m pkb_ray.baselines problems=smoke eval.size=small       # on CPU (gloo): a check

For every chosen problem and every gang layout of the hardware profile it supports (each world
size of ``hardware.world_sizes`` on one node, each ``hardware.spread`` layout over nodes), the
problem's own reference is evaluated as a candidate through the harness (fresh rank processes,
the same timing protocol as samples), and its time is recorded with the speed-of-light time of
the hardware profile, the fraction of it the reference reaches, and the versions (torch, NCCL,
GPU). The table is written to ``<baselines_dir>/<hardware.name>.json`` (merged with rows already
there for other problems, sizes or layouts) and read back by :func:`load` for reports and
``docs/problems.md``.

One-node world sizes run on this machine without Ray (GPUs 0..W-1). Spread layouts run on gangs
of the Ray cluster (``ray.address``), like a sweep's: e.g. ``hardware.spread=[2x4]`` on two nodes
gives, for each problem at W=8, the reference across nodes beside the one inside a node.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

import hydra
from omegaconf import DictConfig

from pkb_ray.cluster import start_ray
from pkb_ray.config import SweepConfig
from pkb_ray.entry import run_job
from pkb_ray.harness import Harness
from pkb_ray.names import Status
from pkb_ray.paths import CONF_DIR
from pkb_ray.pipeline import where_for
from pkb_ray.placement import Layout
from pkb_ray.problem import Problem, load_problems, sol_time_us
from pkb_ray.schema import EvalTask, Result, Sample
from pkb_ray.selection import check_against_problems, resolve_path, with_problems_folder
from pkb_ray.stages.gang_pool import GangPool

log = logging.getLogger("pkb_ray.baselines")
KEY = ("problem_id", "world_size", "nodes", "size", "dtype")


def reference_sample(p: Problem) -> Sample:
    return Sample(problem_id=p.id, model="reference", sample_index=0, source=p.source())


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


def measure(cfg: SweepConfig, problems: dict[str, Problem], ids: list[str], work_dir: Path) -> Iterator[dict[str, Any]]:
    """One baseline row per (problem, supported layout), each as soon as it is measured."""
    for w in cfg.hardware.world_sizes:
        chosen = [pid for pid in ids if problems[pid].meta.world_sizes.supports(w)]
        if not chosen:
            continue
        devices = [f"cuda:{i}" for i in range(w)] if cfg.hardware.device == "cuda" else ["cpu"] * w
        harness = Harness(devices, cfg.eval, cfg.hardware, problems, work_dir=work_dir / f"w{w}",
                          cache_dir=cfg.cache_path)
        try:
            for pid in chosen:
                for where in where_for(cfg, problems, pid, Layout(1, w)):
                    yield row_for(cfg, problems[pid], harness.evaluate(reference_sample(problems[pid]), where))
        finally:
            harness.close()
    spread = cfg.hardware.spread_layouts
    tasks = [EvalTask(reference_sample(problems[pid]), where) for lay in spread
             for pid in ids if problems[pid].meta.world_sizes.supports(lay.world_size)
             for where in where_for(cfg, problems, pid, lay)]
    if tasks:
        start_ray(cfg, spread)
        pool = GangPool(cfg)
        try:
            for _, r in pool.evaluate(tasks):
                yield row_for(cfg, problems[r.problem_id], r)
        finally:
            pool.shutdown()


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
    cfg = with_problems_folder(cfg)
    problems = load_problems(resolve_path(cfg.problems_dir) if cfg.problems_dir else None)
    ids = sorted(check_against_problems(cfg, problems))
    if cfg.hardware.spread:
        start_ray(cfg, cfg.hardware.spread_layouts)  # a cluster without room for them fails now, before any measurement
    baselines_dir = resolve_path(cfg.baselines_dir)
    path = path_for(baselines_dir, cfg.hardware.name)
    rows: list[dict[str, Any]] = []
    for row in measure(cfg, problems, ids, out_dir / "work"):
        rows.append(row)
        save(baselines_dir, cfg.hardware, [row])  # a run cut short keeps what it measured
    failed = [r for r in rows if r["status"] != Status.CORRECT.value]
    print(f"{len(rows) - len(failed)} baselines -> {path}" + (f"; {len(failed)} failed: " + ", ".join(
        f"{r['problem_id']} {r['layout']} ({r['status']})" for r in failed) if failed else ""), flush=True)
    return path


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def main(raw: DictConfig) -> None:
    run_job(raw, lambda cfg: run(cfg, Path(cfg.output_dir)))


if __name__ == "__main__":
    main()
