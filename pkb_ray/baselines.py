"""Reference baselines: each problem's PyTorch + NCCL reference timed on a machine, as a table.

    python -m pkb_ray.baselines hardware=h200_2 eval=gpu            # every problem, default size
    python -m pkb_ray.baselines problems=smoke eval.size=small       # on CPU (gloo): a check

For every chosen problem and every world size of ``hardware.world_sizes`` it supports, the
problem's own reference is evaluated as a candidate through the harness (fresh rank processes,
the same timing protocol as samples), and its time is recorded with the speed-of-light time of
the hardware profile, the fraction of it the reference reaches, and the versions (torch, NCCL,
GPU). The table is written to ``<baselines_dir>/<hardware.name>.json`` (merged with rows already
there for other problems, sizes or world sizes) and read back by :func:`load` for reports and
``docs/problems.md``.

Runs on the local node without Ray (GPUs 0..W-1); inter-node baselines come with multi-node gangs.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from pkb_ray.config import ConfigError, SweepConfig, validate_config
from pkb_ray.harness import Harness
from pkb_ray.problem import Problem, ProblemError, load_problems, sol_time_us
from pkb_ray.schema import Sample, Status
from pkb_ray.selection import check_against_problems, resolve_path

log = logging.getLogger("pkb_ray.baselines")
KEY = ("problem_id", "world_size", "size", "dtype")


def measure(cfg: SweepConfig, problems: dict[str, Problem], ids: list[str], work_dir: Path) -> list[dict[str, Any]]:
    """One baseline row per (problem, supported world size)."""
    rows = []
    for w in cfg.hardware.world_sizes:
        chosen = [pid for pid in ids if problems[pid].meta.world_sizes.supports(w)]
        if not chosen:
            continue
        devices = [f"cuda:{i}" for i in range(w)] if cfg.hardware.device == "cuda" else ["cpu"] * w
        harness = Harness(devices, cfg.eval, cfg.hardware, problems, work_dir=work_dir / f"w{w}",
                          cache_dir=cfg.cache_path)
        try:
            for pid in chosen:
                p = problems[pid]
                r = harness.evaluate(Sample(problem_id=pid, model="reference", sample_index=0, source=p.source()))
                label, knobs = p.size(cfg.eval.size)
                dtype = cfg.eval.dtype or p.meta.dtypes[0]
                sol = sol_time_us(p, knobs, w, dtype, cfg.hardware)
                ok = r.status == Status.CORRECT and r.ref_time_us
                rows.append({
                    "problem_id": pid, "category": p.meta.category, "world_size": w, "size": label, "dtype": dtype,
                    "status": r.status.value, "message": "" if ok else r.message[:500],
                    "ref_time_us": r.ref_time_us if ok else None,
                    "ref_iqr_us": max(r.ref_iqr_us) if ok and r.ref_iqr_us else None,
                    "sol_time_us": sol, "sol_fraction": sol / r.ref_time_us if ok else None,
                    "hardware": cfg.hardware.name, "versions": r.versions,
                    "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                })
                log.info("%s W=%d %s: %s ref=%s us sol=%.1f us", pid, w, label, r.status.value,
                         f"{r.ref_time_us:.1f}" if ok else "-", sol)
        finally:
            harness.close()
    return rows


def path_for(baselines_dir: Path, hardware_name: str) -> Path:
    return Path(baselines_dir) / f"{hardware_name}.json"


def load(baselines_dir: Path, hardware_name: str) -> list[dict[str, Any]]:
    """The baseline rows recorded for a hardware profile ([] if none)."""
    path = path_for(baselines_dir, hardware_name)
    return json.loads(path.read_text())["rows"] if path.exists() else []


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


def run(cfg: SweepConfig, out_dir: Path) -> Path:
    problems = load_problems(resolve_path(cfg.problems_dir) if cfg.problems_dir else None)
    ids = sorted(check_against_problems(cfg, problems))
    rows = measure(cfg, problems, ids, out_dir / "work")
    path = save(resolve_path(cfg.baselines_dir), cfg.hardware, rows)
    failed = [r for r in rows if r["status"] != Status.CORRECT.value]
    print(f"{len(rows) - len(failed)} baselines -> {path}" + (f"; {len(failed)} failed: " + ", ".join(
        f"{r['problem_id']} W={r['world_size']} ({r['status']})" for r in failed) if failed else ""), flush=True)
    return path


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(raw: DictConfig) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        cfg = validate_config(OmegaConf.to_container(raw, resolve=True), source="config")
        run(cfg, Path(cfg.output_dir))
    except (ConfigError, ProblemError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
