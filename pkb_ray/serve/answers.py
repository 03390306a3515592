"""A verdict as the service answers it: the sweep's result row, the reward, and feedback a model can
act on in its next turn."""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from pkb_ray.generate.prompt import feedback
from pkb_ray.serve.reward import reward
from pkb_ray.spec.config import SweepConfig
from pkb_ray.spec.names import Status
from pkb_ray.spec.schema import Result

FEEDBACK_SLOW_BELOW = 1.0  # a correct sample is told to beat the reference


@lru_cache(maxsize=1)
def evaluator_version() -> str:
    """pkb_ray's version and a digest of its code: a verdict is reused only by the code that gave it."""
    from pkb_ray import __version__

    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return f"{__version__}+{digest.hexdigest()[:12]}"


def config_digest(cfg: SweepConfig) -> str:
    """What else decides a verdict: the eval settings and the hardware profile (with the code's version)."""
    text = json.dumps([evaluator_version(), cfg.eval.model_dump(mode="json"), cfg.hardware.model_dump(mode="json"),
                       cfg.problems_dir], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def answer(result: Result, cfg: SweepConfig, cached: bool) -> dict[str, Any]:
    """The response body of one verdict (docs/serve.md#the-answer)."""
    correct = result.status == Status.CORRECT
    speedup = result.speedup if correct else None
    interval = [result.speedup_lo, result.speedup_hi] if correct and result.speedup_lo is not None else None
    return {
        "status": result.status.value, "correct": correct, "speedup": speedup, "speedup_interval": interval,
        "reward": reward(correct, speedup, cfg.serve.reward),
        "feedback": served_feedback(result, cfg),
        "eval_seconds": result.eval_seconds, "cached": cached,
        "sol_fraction": result.sol_fraction if correct else None,
        "ref_time_us": result.ref_time_us, "cand_time_us": result.cand_time_us,
        "timing_mode": result.timing_mode or None,
        "message": result.message, "failed_rank": result.failed_rank,
        "problem_id": result.problem_id, "backend": result.backend, "world_size": result.world_size,
        "size": result.size, "dtype": result.dtype, "hardware": result.hardware,
        "sample_key": result.sample_key, "evaluator_version": evaluator_version(),
    }


def served_feedback(result: Result, cfg: SweepConfig) -> str:
    """The refinement round's feedback (pkb_ray.generate.prompt.feedback: trimmed errors, the first mismatch
    with its rank, index, values and max abs error), with the speedup's interval where there is one."""
    row = result.model_dump(mode="json")
    text = feedback(row, cfg, FEEDBACK_SLOW_BELOW)
    if result.status == Status.CORRECT and result.speedup_lo is not None:
        text += (f"\n\nThe speedup's 95% interval over the timed rounds: [{result.speedup_lo:.2f}, "
                 f"{result.speedup_hi:.2f}].")
    return text
