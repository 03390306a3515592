"""Wiring of the stages for one run: rows -> validate -> compile -> evaluate -> results.

Each row is evaluated at every world size of ``hardware.world_sizes`` that its problem supports.
Validation and Python's compile check are cheap and run in the driver; CUDA sources are built by
nvcc on CPU-only compiler actors; evaluation runs on the gang pool. Results are handed to ``sink`` as they arrive and flushed to Parquet
every ``flush_every`` rows, so a run that dies keeps what it finished.
"""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path
from typing import Any, Callable

import ray

from pkb_ray.config import SweepConfig
from pkb_ray.problem import Problem
from pkb_ray.samples import finished, write_results
from pkb_ray.schema import Result, Sample
from pkb_ray.stages.compile import (BuildSettings, CompilePool, apply_build, build_settings, build_sources,
                                    compile_sample, uses_cuda)
from pkb_ray.stages.evaluate import GangPool
from pkb_ray.stages.validate import validate

log = logging.getLogger(__name__)


def select_rows(rows: list[dict[str, Any]], cfg: SweepConfig, problems: dict[str, Problem]) -> list[dict[str, Any]]:
    """Keep the rows of the problems this run covers (rows naming unknown problems stay: validate reports them)."""
    ids = set(cfg.problems.ids or problems)
    if cfg.problems.categories:
        ids &= {p.id for p in problems.values() if p.meta.category in cfg.problems.categories}
    return [r for r in rows if r.get("problem_id") in ids or r.get("problem_id") not in problems]


def world_sizes_for(row: dict[str, Any], problems: dict[str, Problem], world_sizes: list[int]) -> list[int]:
    """The run's world sizes this row's problem supports (the first one, if none: validate says why)."""
    problem = problems.get(row.get("problem_id"))
    fitting = [w for w in world_sizes if problem is not None and problem.meta.world_sizes.supports(w)]
    return fitting or world_sizes[:1]


def prepare(row: dict[str, Any], problems: dict[str, Problem], world_size: int) -> Sample | Result:
    """Validate then compile one row: a Sample ready for a gang, or its final Result."""
    out = validate(row, problems, world_size)
    if isinstance(out, Sample):
        out = compile_sample(out, world_size, problems[out.problem_id].meta.category)
    return out


def prepare_here(row: dict[str, Any], problems: dict[str, Problem], world_size: int,
                 settings: BuildSettings) -> Sample | Result:
    """:func:`prepare`, then any CUDA builds in this process (for scripts that run without Ray)."""
    out = prepare(row, problems, world_size)
    if isinstance(out, Sample) and uses_cuda(out):
        out = apply_build(out, build_sources(out.source, settings), world_size, problems[out.problem_id].meta.category)
    return out


def build_cuda(tasks: list[tuple[Sample, int]], cfg: SweepConfig, problems: dict[str, Problem],
               emit: Callable[[Result], None]) -> list[tuple[Sample, int]]:
    """Build the CUDA sources of the tasks that have any on CPU actors; emit their compile errors."""
    cuda = [s.source for s, _ in tasks if uses_cuda(s)]
    if not cuda:
        return tasks
    settings = build_settings(cfg.hardware.arch, cfg.cache_path, cfg.eval.compile_timeout_s)
    workers = cfg.eval.compile_workers or min(16, max(1, int(ray.cluster_resources().get("CPU", 1))))
    pool = CompilePool(settings, min(workers, len(set(cuda))))
    try:
        outcomes = pool.build_all(cuda)
    finally:
        pool.shutdown()
    log.info("compile: %s", dict(pool.stats))
    kept = []
    for sample, world in tasks:
        if sample.source in outcomes:
            sample = apply_build(sample, outcomes[sample.source], world, problems[sample.problem_id].meta.category)
        if isinstance(sample, Result):
            emit(sample.model_copy(update={"hardware": cfg.hardware.name, "device_backend": cfg.hardware.backend}))
        else:
            kept.append((sample, world))
    return kept


def dedup_key(sample: Sample, world: int) -> tuple:
    """Samples with the same key get the same verdict: evaluate one, copy it to the others."""
    return (sample.problem_id, sample.backend, world, hashlib.sha256(sample.source.encode()).hexdigest())


def as_duplicate(result: Result, sample: Sample) -> Result:
    """``result`` (of an identical sample) under ``sample``'s identity."""
    return result.model_copy(update={"sample_key": sample.key, "model": sample.model, "sample_index": sample.sample_index,
                                     "duplicate_of": result.sample_key})


def run_pipeline(rows: list[dict[str, Any]], cfg: SweepConfig, problems: dict[str, Problem], results_dir: Path,
                 flush_every: int = 16, on_result: Callable[[Result], None] | None = None,
                 resume: bool = True) -> list[Result]:
    """Evaluate ``rows`` into ``results_dir``; with ``resume``, rows with a final result there are skipped."""
    done = finished(results_dir) if resume else set()
    results: list[Result] = []
    unflushed: list[Result] = []

    def emit(result: Result) -> None:
        results.append(result)
        unflushed.append(result)
        if on_result:
            on_result(result)
        if len(unflushed) >= flush_every:
            write_results(unflushed, results_dir)
            unflushed.clear()

    ready: list[tuple[Sample, int]] = []
    skipped = 0
    for row in rows:
        for world in world_sizes_for(row, problems, cfg.hardware.world_sizes):
            out = prepare(row, problems, world)
            key = out.key if isinstance(out, Sample) else out.sample_key
            if (key, world) in done:
                skipped += 1
            elif isinstance(out, Sample):
                ready.append((out, world))
            else:  # settled before any rank ran: still say where it would have run
                emit(out.model_copy(update={"hardware": cfg.hardware.name, "device_backend": cfg.hardware.backend}))
    if skipped:
        log.info("resume: %d (sample, world size) pairs already have a final result in %s", skipped, results_dir)
    ready = build_cuda(ready, cfg, problems, emit)
    groups: dict[tuple, list[tuple[Sample, int]]] = {}
    for sample, world in ready:
        groups.setdefault(dedup_key(sample, world), []).append((sample, world))
    unique = [members[0] for members in groups.values()]
    if len(unique) < len(ready):
        log.info("dedup: %d identical samples share %d evaluations", len(ready), len(unique))
    try:
        if unique:
            _evaluate(unique, groups, cfg, emit)
    finally:
        if unflushed:
            write_results(unflushed, results_dir)
    return results


def _evaluate(unique: list[tuple[Sample, int]], groups: dict[tuple, list[tuple[Sample, int]]], cfg: SweepConfig,
              emit: Callable[[Result], None]) -> None:
    pool = GangPool(cfg)
    t0 = time.monotonic()
    try:
        for n, result in enumerate(pool.evaluate(unique), 1):
            emit(result)
            members = groups[(result.problem_id, result.backend, result.world_size,
                              hashlib.sha256(result.source.encode()).hexdigest())]
            for sample, _ in members[1:]:
                emit(as_duplicate(result, sample))
            log.info("[%d/%d] %s #%d W=%d %s on %s (%.1fs)", n, len(unique), result.problem_id, result.sample_index,
                     result.world_size, result.status.value, result.gang, time.monotonic() - t0)
    finally:
        pool.shutdown()
