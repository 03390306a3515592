"""``import pkb_ray``: a sweep run from Python, its results read back, a problem loaded; a bad
override fails at once with the key named."""

import json

import pytest

import pkb_ray
from conftest import REPO
from pkb_ray.spec.config import ConfigError

pytestmark = pytest.mark.slow


def test_a_sweep_from_python_and_its_files(shared_ray, tmp_path):
    import ray

    samples = tmp_path / "samples" / "all_reduce"
    samples.mkdir(parents=True)
    (samples / "00_copy.py").write_text((REPO / "samples/replay/all_reduce/00_reference_copy.py").read_text())
    try:
        table = pkb_ray.run_sweep(f"model.samples={tmp_path / 'samples'}", "wandb=disabled", "eval.rounds=5",
                                  f"cache_dir={tmp_path / 'cache'}", *shared_ray.overrides(2), out_dir=tmp_path / "run")
    finally:
        ray.shutdown()  # the sweep joined the session's cluster from this process
    rows = pkb_ray.read_results(tmp_path / "run" / "results")
    assert list(rows.status) == ["correct"] and len(table)
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["scalars"]["pass@1"] == 1.0
    assert "def solution" in pkb_ray.load_problems()["all_reduce"].source()


def test_a_bad_override_fails_before_anything_starts(tmp_path):
    with pytest.raises(ConfigError, match="eval.trails"):
        pkb_ray.run_sweep("eval.trails=3", out_dir=tmp_path)
    assert pkb_ray.compose_config(["hardware=h200_2"]).hardware.device == "cuda"
    with pytest.raises(AttributeError):
        pkb_ray.no_such_thing
