"""How a run is named in W&B and what its Artifacts and generation figures say (pure functions)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from pkb_ray.generate.stage import GenerationStats, cost_usd
from pkb_ray.spec.config import ModelConfig, SweepConfig
from pkb_ray.summary.tracking import artifact_name, folder_digest
from pkb_ray.sweep import content_label, run_name, sweep_group_name


def _row(prompt: int, completion: int, error: str = "") -> dict:
    return {"metadata": {"prompt_tokens": str(prompt), "completion_tokens": str(completion),
                         "generation_error": error}}


def test_a_sweeps_group_carries_its_date_so_two_days_at_ten_are_two_groups():
    assert sweep_group_name(Path("multirun/2026-12-03/10-00-00")) == "2026-12-03_10-00-00"
    assert sweep_group_name(Path("multirun/2026-12-04/10-00-00")) != sweep_group_name(
        Path("multirun/2026-12-03/10-00-00"))
    assert sweep_group_name(Path("/tmp/my_sweep")) == "my_sweep"  # a folder of the user's own: as it is


def test_a_runs_name_says_what_and_when():
    cfg = SweepConfig()
    when = datetime(2026, 12, 3, 9, 5)
    assert run_name(cfg, "eval.rounds=10", when) == "replay-cpu_gloo [eval.rounds=10] 2026-12-03 09:05"
    assert run_name(cfg, None, when).endswith(" 2026-12-03 09:05")


def test_artifacts_are_named_by_content_so_reruns_version_one_artifact():
    label = content_label(SweepConfig())
    assert artifact_name("results", label) == "results-replay-all"
    assert artifact_name("generated", "gpt 5/mini-pkb") == "generated-gpt_5_mini-pkb"  # only W&B's characters


def test_a_folders_digest_follows_names_and_contents(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.parquet").write_bytes(b"one")
    first = folder_digest(tmp_path / "a")
    assert folder_digest(tmp_path / "a") == first and len(first) == 64
    (tmp_path / "a" / "x.parquet").write_bytes(b"two")
    assert folder_digest(tmp_path / "a") != first
    (tmp_path / "a" / "x.parquet").write_bytes(b"one")
    (tmp_path / "a" / "x.parquet").rename(tmp_path / "a" / "y.parquet")
    assert folder_digest(tmp_path / "a") != first


def test_generation_stats_count_samples_errors_tokens_and_cost():
    priced = ModelConfig(usd_per_mtok_in=2.0, usd_per_mtok_out=8.0)
    stats = GenerationStats(total=3)
    stats.add([_row(1000, 500), _row(2000, 0, "no solution in the model's reply")], priced)
    assert (stats.done, stats.errors, stats.prompt_tokens, stats.completion_tokens) == (2, 1, 3000, 500)
    assert stats.cost_usd == pytest.approx((3000 * 2.0 + 500 * 8.0) / 1e6)
    stats.add([_row(0, 0, "generation failed: 500")], priced)  # a failed request: no tokens, an error
    assert (stats.done, stats.errors) == (3, 2)
    assert cost_usd(ModelConfig(), 10**6, 10**6) is None  # unpriced: no made-up cost
    assert cost_usd(ModelConfig(usd_per_mtok_out=1.0), 10**6, 10**6) == pytest.approx(1.0)
