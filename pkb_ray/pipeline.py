"""Wiring of the stages for one run: rows -> validate -> compile -> evaluate -> results.

Each row is evaluated at every world size of ``hardware.world_sizes`` that its problem supports.
Validation and compilation of Python sources are cheap and run in the driver; evaluation runs on
the gang pool through Ray. Results are handed to ``sink`` as they arrive and flushed to Parquet
every ``flush_every`` rows, so a run that dies keeps what it finished.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Callable

from pkb_ray.config import SweepConfig
from pkb_ray.problem import Problem
from pkb_ray.samples import write_results
from pkb_ray.schema import Result, Sample
from pkb_ray.stages.compile import compile_sample
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


def run_pipeline(rows: list[dict[str, Any]], cfg: SweepConfig, problems: dict[str, Problem], results_dir: Path,
                 flush_every: int = 16, on_result: Callable[[Result], None] | None = None) -> list[Result]:
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
    for row in rows:
        for world in world_sizes_for(row, problems, cfg.hardware.world_sizes):
            out = prepare(row, problems, world)
            if isinstance(out, Sample):
                ready.append((out, world))
            else:  # settled before any rank ran: still say where it would have run
                emit(out.model_copy(update={"hardware": cfg.hardware.name, "device_backend": cfg.hardware.backend}))
    pool = GangPool(cfg)
    t0 = time.monotonic()
    try:
        for n, result in enumerate(pool.evaluate(ready), 1):
            emit(result)
            log.info("[%d/%d] %s #%d W=%d %s on %s (%.1fs)", n, len(ready), result.problem_id, result.sample_index,
                     result.world_size, result.status.value, result.gang, time.monotonic() - t0)
    finally:
        pool.shutdown()
        if unflushed:
            write_results(unflushed, results_dir)
    return results
