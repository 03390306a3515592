"""Config composition with Hydra, overrides, and validation errors that name the key."""

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from conftest import REPO
from pkb_ray.config import ConfigError, validate_config
from pkb_ray.sweep import check_against_problems


def composed(*overrides: str):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["output_dir=/tmp/x", *overrides])
    return OmegaConf.to_container(cfg, resolve=True)


def test_default_composes_and_validates():
    cfg = validate_config(composed())
    assert cfg.model.name == "replay" and cfg.hardware.backend == "gloo"
    assert cfg.eval.rounds == 200 and cfg.wandb.mode == "offline"


def test_group_choice_and_key_overrides():
    cfg = validate_config(composed("hardware=h200_2", "eval=gpu", "eval.trials=7", "problems=smoke"))
    assert cfg.hardware.backend == "nccl" and cfg.hardware.link_gbps == 450.0
    assert cfg.eval.trials == 7 and cfg.problems.ids == ["all_reduce", "all_gather"]


@pytest.mark.parametrize(
    "override, key",
    [
        ("eval.trials=0", "eval.trials"),
        ("eval.timeout_s=-1", "eval.timeout_s"),
        ("hardware.device=tpu", "hardware.device"),
        ("wandb.mode=sometimes", "wandb.mode"),
        ("hardware.world_sizes=[16]", "hardware"),
        ("hardware.world_sizes=[2,2]", "hardware"),
        ("+eval.colour=red", "eval.colour"),
    ],
)
def test_bad_values_fail_naming_the_key(override, key):
    with pytest.raises(ConfigError) as err:
        validate_config(composed(override))
    assert f": {key}" in str(err.value)


@pytest.mark.parametrize(
    "override, key",
    [("problems.ids=[all_reduce,nope]", "problems.ids"), ("eval.size=huge", "eval.size"),
     ("eval.dtype=int32", "eval.dtype"), ("problems.categories=[astrology]", "problems.categories"),
     ("eval.size={rows:3}", "eval.size")],
)
def test_config_that_contradicts_the_problems_fails_at_start(problems, override, key):
    cfg = validate_config(composed(override))
    with pytest.raises(ConfigError, match=key):
        check_against_problems(cfg, problems)


def test_size_may_be_explicit_knob_values(problems):
    cfg = validate_config(composed("eval.size={numel:65536}", "problems.ids=[all_gather,all_reduce]"))
    assert cfg.eval.size == {"numel": 65536}
    assert check_against_problems(cfg, problems)
    assert problems["all_gather"].size(cfg.eval.size) == ("numel=65536", {"numel": 65536})
