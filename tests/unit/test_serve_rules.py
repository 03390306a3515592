"""The reward service's rules without a service: the reward function, what trainers' labels and
completions become, OpenRLHF's request and answer shapes, and when a token is required."""

import json
import math

import pytest

from pkb_ray.serve.adapters import openrlhf
from pkb_ray.serve.adapters.labels import item, target
from pkb_ray.serve.main import is_loopback, read_token
from pkb_ray.serve.reward import reward
from pkb_ray.spec.config import ConfigError, RewardConfig, SweepConfig

CODE = "import torch\n\ndef solution(x):\n    return x\n"


def test_the_default_reward_is_zero_unless_correct_and_faster_then_bounded_and_increasing():
    cfg = RewardConfig()
    assert reward(False, 5.0, cfg) == 0.0 and reward(False, None, cfg) == 0.0  # fast and wrong earns nothing
    assert reward(True, 0.5, cfg) == reward(True, 1.0, cfg) == 0.0  # correct but no faster than the reference
    speeds = [1.01, 1.5, 2.0, 3.0, 3.99]
    rewards = [reward(True, s, cfg) for s in speeds]
    assert all(a < b for a, b in zip(rewards, rewards[1:]))  # strictly increasing below the cap
    assert all(0.0 < r < 1.0 for r in rewards)
    assert reward(True, cfg.speedup_cap, cfg) == pytest.approx(1.0) and reward(True, 1000.0, cfg) == 1.0
    assert reward(True, None, cfg) == reward(True, float("inf"), cfg) == reward(True, math.nan, cfg) == 0.0
    assert reward(True, 2.0, cfg) == pytest.approx(0.5)  # log scale: 1x -> 2x as much as 2x -> 4x
    assert reward(True, 3.0, cfg, copy=True) == cfg.copy_reward == 0.0  # the reference handed back


def test_the_other_reward_kinds():
    binary, fast = RewardConfig(kind="binary"), RewardConfig(kind="fast", fast_p=1.2, correct_reward=0.3)
    assert (reward(True, 0.1, binary), reward(False, 9.0, binary)) == (1.0, 0.0)
    assert (reward(True, 1.3, fast), reward(True, 1.1, fast), reward(False, 2.0, fast)) == (1.0, 0.3, 0.0)
    assert reward(False, 1.0, RewardConfig(failure=-1.0)) == -1.0
    with pytest.raises(ValueError):
        RewardConfig(failure=0.5)  # a failure may not pay


def test_labels_name_the_problem_and_backend():
    assert target("all_reduce") == ("all_reduce", "torch")
    assert target("all_reduce:cuda") == ("all_reduce", "cuda")
    assert target(json.dumps({"problem_id": "gather", "backend": "triton"})) == ("gather", "triton")
    assert target({"problem_id": "gather"}) == ("gather", "torch")
    assert target("ignored", {"problem_id": "scatter", "backend": "cuda"}) == ("scatter", "cuda")


def test_a_completion_becomes_an_item_or_says_why_not():
    found, why = item(f"Here it is:\n```python\n{CODE}```\nDone.", "all_reduce:cuda", {"sample_id": "r7"})
    assert found == {"problem_id": "all_reduce", "source": CODE, "backend": "cuda", "sample_id": "r7"} and why == ""
    assert item("I cannot help with that.", "all_reduce") == (None, "the reply has no Python code block")


def test_openrlhf_requests_and_answers_have_its_shape():
    prompt = "<|user|>write all_reduce<|assistant|>"
    body = {"query": [prompt + f"```python\n{CODE}```", prompt + "no code"], "prompts": [prompt, prompt],
            "labels": ["all_reduce", "all_gather"]}
    found = openrlhf.items(body)
    assert found[0][0]["source"] == CODE and found[0][0]["problem_id"] == "all_reduce" and found[1][0] is None
    answer = openrlhf.answer([{"reward": 0.7, "correct": True, "speedup": 1.3},
                              {"reward": 0.0, "correct": False, "speedup": None}])
    assert answer["rewards"] == [0.7, 0.0] == answer["scores"]
    assert answer["extra_logs"] == {"correct": [1.0, 0.0], "speedup": [1.3, -1.0], "judged": [1.0, 1.0]}
    with pytest.raises(ValueError, match="one length"):
        openrlhf.items({"query": ["a", "b"], "labels": ["x"]})


def test_a_service_reachable_from_elsewhere_needs_a_token(tmp_path, monkeypatch):
    monkeypatch.delenv("PKB_RAY_SERVE_TOKEN", raising=False)
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3") and not is_loopback("example.org")
    open_cfg = SweepConfig.model_validate({"serve": {"host": "0.0.0.0"}})
    with pytest.raises(ConfigError, match="serve.host=0.0.0.0 is reachable from other machines"):
        read_token(open_cfg)
    assert read_token(SweepConfig()) is None  # loopback: no token needed
    (tmp_path / "token").write_text("s3cret\n")
    assert read_token(SweepConfig.model_validate({"serve": {"host": "0.0.0.0", "token_file": str(tmp_path / "token")}})) \
        == "s3cret"
    monkeypatch.setenv("PKB_RAY_SERVE_TOKEN", "from-env")
    assert read_token(open_cfg) == "from-env"
    (tmp_path / "empty").write_text("")
    with pytest.raises(ConfigError, match="serve.token_file: .* is empty"):
        read_token(SweepConfig.model_validate({"serve": {"token_file": str(tmp_path / "empty")}}))


def test_the_service_judges_with_its_own_protocol_unless_the_command_line_sets_one():
    """serve.protocol (3 trials, 2 timing sets, 50 rounds) over the eval profile's; a key given on
    the command line, or set to null in serve.protocol, keeps what eval says."""
    from pkb_ray.serve.main import service_config

    served = service_config(["hardware=h200_2"])
    assert (served.eval.trials, served.eval.timing_sets, served.eval.rounds) == (3, 2, 50)
    assert served.eval.size == "default" and served.eval.timeout_s == 60  # the rest is the GPU profile's
    assert service_config(["hardware=h200_2", "eval.rounds=80"]).eval.rounds == 80
    kept = service_config(["hardware=h200_2", "serve.protocol.rounds=null", "serve.protocol.trials=null"])
    assert (kept.eval.trials, kept.eval.timing_sets, kept.eval.rounds) == (5, 2, 100)
