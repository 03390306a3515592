"""A run's samples through the pipeline, then the refinement rounds: failed or slow samples go back
to the model with the evaluator's feedback (``model.refine_rounds``, generated models only), and
each answer through the pipeline again, into the same results folder.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable

from pkb_ray.generate.stage import generate, refine_requests
from pkb_ray.pipeline.wiring import run_pipeline
from pkb_ray.problem import Problem
from pkb_ray.results.parquet import newest, read_results
from pkb_ray.spec.config import SweepConfig

log = logging.getLogger(__name__)


def evaluate_and_refine(rows: list[dict[str, Any]], cfg: SweepConfig, problems: dict[str, Problem], chosen: list,
                        results_dir: Path | str, generated_dir: Path | str, problems_dir: str | None,
                        on_progress: Callable | None = None, start: Callable[[], None] | None = None,
                        on_generation: Callable | None = None) -> None:
    """Evaluate ``rows``, then run up to ``model.refine_rounds`` rounds of feedback and evaluation
    (``start``: see :func:`~pkb_ray.pipeline.wiring.run_pipeline`)."""
    run_pipeline(rows, cfg, problems, results_dir, problems_dir=problems_dir, on_progress=on_progress, start=start)
    generated = list(rows)
    rounds = cfg.model.refine_rounds if cfg.model.provider == "openai" else 0
    for round_ in range(1, rounds + 1):
        asks = refine_requests(cfg, chosen, newest(read_results(results_dir)), generated, round_)
        log.info("refinement round %d: %d samples go back to the model", round_, len(asks))
        if not asks:
            break
        new = generate(asks, cfg, generated_dir, on_generation)
        generated += new
        run_pipeline(new, cfg, problems, results_dir, problems_dir=problems_dir, on_progress=on_progress, start=start)
