"""The W&B tracker on its own, offline (a real W&B run file read back): generation logged live."""

from __future__ import annotations

import pytest

import wandb_files
from pkb_ray.generate.stage import GenerationStats
from pkb_ray.spec.config import ModelConfig, WandbConfig
from pkb_ray.summary.tracking import Tracker


def _rows(n: int, errors: int = 0) -> list[dict]:
    return [{"metadata": {"prompt_tokens": "100", "completion_tokens": "50",
                          "generation_error": "no solution" if i < errors else ""}} for i in range(n)]


def test_generation_is_logged_as_it_goes_and_totals_span_round_0_and_refinement(tmp_path):
    model = ModelConfig(usd_per_mtok_in=1.0, usd_per_mtok_out=4.0)
    tracker = Tracker(WandbConfig(mode="offline"), {"model": {"name": "m"}}, tmp_path, name="m")
    round0 = GenerationStats(total=4)
    round0.add(_rows(2, errors=1), model)
    tracker.log_generation(round0)
    round0.add(_rows(2), model)
    tracker.log_generation(round0)
    refine = GenerationStats(total=1)  # a refinement round: another generate() call
    refine.add(_rows(1), model)
    tracker.log_generation(refine)
    second = GenerationStats(total=2)  # a second refinement round: every earlier call still counts
    second.add(_rows(2), model)
    tracker.log_generation(second)
    tracker.close()
    run_file = next(tmp_path.glob("wandb/offline-run-*/run-*.wandb"))
    assert wandb_files.history_steps(run_file, "generation/samples") == [2, 4, 5, 7]
    assert wandb_files.history_steps(run_file, "generation/fraction_done") == [0.5, 1.0, 1.0, 1.0]
    summary = wandb_files.summary(run_file)
    assert summary["generation/errors"] == 1 and summary["generation/completion_tokens"] == 350
    assert summary["generation/cost_usd"] == pytest.approx((700 * 1.0 + 350 * 4.0) / 1e6)
