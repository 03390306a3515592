"""The reward pays for beating the reference, not for handing it back: the default formula's values,
and the service-side check that flags a copy of the problem's reference (pkb_ray.serve.answers)."""

import math

import pytest

from conftest import REPO
from pkb_ray.serve.answers import answer, fingerprint, is_reference_copy
from pkb_ray.serve.reward import reward
from pkb_ray.spec.config import RewardConfig, SweepConfig
from pkb_ray.spec.names import Status
from pkb_ray.spec.schema import Result

REFERENCE = (REPO / "problems" / "all_reduce.py").read_text()

# the reference's solution with every local renamed, the alias changed, annotations, docstrings and
# comments added or dropped, reformatted, without the rest of the problem file
RENAMED = '''
import torch.distributed as d


def solution(tensor):
    """Sum over ranks."""
    # copy first: the input must not change
    result = tensor.clone()
    d.all_reduce(result,
                 op=d.ReduceOp.SUM)
    return result
'''

# the same written with full module paths and a from-import
FULL_PATHS = '''
import torch
from torch.distributed import ReduceOp


def solution(a: torch.Tensor) -> torch.Tensor:
    b = a.clone()
    torch.distributed.all_reduce(b, op=ReduceOp.SUM)
    return b
'''

# the clone moved into a helper: another structure (not inlined), however it is named or placed
WITH_HELPER = '''
import torch
from torch.distributed import ReduceOp


def solution(a):
    b = _copy(a)
    torch.distributed.all_reduce(b, op=ReduceOp.SUM)
    return b


def _copy(t):
    return t.clone()
'''


def test_the_default_reward_is_zero_up_to_1x_then_rises_with_log_speedup_to_1_at_the_cap():
    cfg = RewardConfig()
    assert (cfg.correct_reward, cfg.speedup_cap, cfg.copy_reward) == (0.0, 4.0, 0.0)
    assert reward(True, 0.5, cfg) == 0.0  # slower than the reference: nothing
    assert reward(True, 1.0, cfg) == 0.0  # as fast as the reference (a copy's speed): nothing
    assert reward(True, 2.0, cfg) == pytest.approx(0.5)  # log(2) / log(4)
    assert reward(True, math.sqrt(2), cfg) == pytest.approx(0.25)  # each doubling is worth the same
    assert reward(True, 4.0, cfg) == pytest.approx(1.0) and reward(True, 50.0, cfg) == 1.0  # bounded at the cap
    speeds = [1.01, 1.1, 1.5, 2.0, 3.0, 3.9]
    rewards = [reward(True, s, cfg) for s in speeds]
    assert all(0 < a < b < 1 for a, b in zip(rewards, rewards[1:]))  # strictly increasing between 1x and the cap
    assert reward(False, 10.0, cfg) == 0.0  # fast and wrong earns nothing
    assert reward(True, None, cfg) == reward(True, math.nan, cfg) == 0.0  # unknown speed: correct_reward


def test_a_floor_for_correctness_and_the_other_kinds_follow_their_settings():
    floor = RewardConfig(correct_reward=0.2)
    assert reward(True, 0.5, floor) == 0.2 and reward(True, 2.0, floor) == pytest.approx(0.6)
    assert reward(True, 0.3, RewardConfig(kind="binary")) == 1.0
    fast = RewardConfig(kind="fast", fast_p=1.2)
    assert (reward(True, 1.3, fast), reward(True, 1.1, fast)) == (1.0, 0.0)


def test_a_copy_earns_copy_reward_whatever_the_kind_and_a_failed_copy_earns_failure():
    for kind in ("speedup", "binary", "fast"):
        assert reward(True, 3.0, RewardConfig(kind=kind), copy=True) == 0.0
    assert reward(True, 1.0, RewardConfig(copy_reward=-0.5), copy=True) == -0.5
    assert reward(False, 1.0, RewardConfig(failure=-1.0, copy_reward=0.3), copy=True) == -1.0
    with pytest.raises(ValueError):
        RewardConfig(copy_reward=1.5)


def test_the_reference_verbatim_is_a_copy():
    assert is_reference_copy(REFERENCE, None, "all_reduce")
    assert is_reference_copy(REFERENCE.replace("\n\n\n", "\n\n"), str(REPO / "problems"), "all_reduce")
    # every problem of the checkout is a copy of itself and of no other problem
    mine = {p.stem: fingerprint(p.read_text()) for p in sorted((REPO / "problems").glob("*.py"))}
    assert None not in mine.values()
    assert is_reference_copy((REPO / "problems" / "all_gather.py").read_text(), None, "all_gather")
    assert not is_reference_copy((REPO / "problems" / "all_gather.py").read_text(), None, "all_reduce")


def test_a_renamed_or_reformatted_copy_is_a_copy():
    assert is_reference_copy(RENAMED, None, "all_reduce")
    assert is_reference_copy(FULL_PATHS, None, "all_reduce")


def test_helpers_are_compared_as_reached_not_as_placed():
    helper_first = ("import torch.distributed as dist\n\n\ndef _clone_it(x):\n    return x.clone()\n\n\n"
                    "def solution(y):\n    z = _clone_it(y)\n    dist.all_reduce(z, op=dist.ReduceOp.SUM)\n"
                    "    return z\n")
    assert fingerprint(helper_first) == fingerprint(WITH_HELPER)  # renamed and moved: the same code
    assert not is_reference_copy(WITH_HELPER, None, "all_reduce")  # a helper is a change of structure


@pytest.mark.parametrize("changed", [
    # another collective
    RENAMED.replace("d.all_reduce(result,", "d.all_gather_into_tensor(result, tensor,"),
    # another reduction
    RENAMED.replace("d.ReduceOp.SUM", "d.ReduceOp.MAX"),
    # the default op left out: not the same call (it is judged by its speed, ~1x, like any other)
    RENAMED.replace(",\n                 op=d.ReduceOp.SUM)", ")"),
    # statements reordered: reduces the input in place, then copies it
    RENAMED.replace("    result = tensor.clone()\n    d.all_reduce(result,\n                 op=d.ReduceOp.SUM)\n",
                    "    d.all_reduce(tensor,\n                 op=d.ReduceOp.SUM)\n    result = tensor.clone()\n"),
    # one more call on the copy
    RENAMED.replace("result = tensor.clone()", "result = tensor.clone().contiguous()"),
    # a side effect at import
    RENAMED + "\ntorch_backend = d.get_backend\nd.all_reduce = d.all_reduce\n",
    # the copy's first statement changed
    FULL_PATHS.replace("b = a.clone()", "b = a.detach().clone()"),
])
def test_modified_code_is_not_a_copy(changed):
    assert fingerprint(changed) is not None
    assert not is_reference_copy(changed, None, "all_reduce")


def test_sources_without_a_solution_function_are_never_copies():
    assert fingerprint("def solution(:\n") is None  # does not parse
    assert fingerprint("solution = print\n") is None
    assert not is_reference_copy("solution = print\n", None, "all_reduce")
    assert not is_reference_copy(REFERENCE, None, "no_such_problem")  # no reference to compare with


def test_the_answer_flags_a_copy_and_pays_copy_reward(tmp_path):
    """The service's answer (answers.answer) for a correct copy and a correct rewrite at the same speed."""
    cfg = SweepConfig()

    def verdict(source: str) -> dict:
        result = Result(sample_key="k", problem_id="all_reduce", model="m", sample_index=0, backend="torch",
                        status=Status.CORRECT, world_size=2, speedup=2.0, speedup_lo=1.9, speedup_hi=2.1,
                        source=source)
        return answer(result, cfg, cached=False)

    copied, own = verdict(RENAMED), verdict(RENAMED.replace("d.ReduceOp.SUM", "d.ReduceOp.SUM, async_op=False"))
    assert copied["reference_copy"] is True and copied["reward"] == 0.0 and copied["correct"] is True
    assert "reference implementation itself" in copied["feedback"]
    assert own["reference_copy"] is False and own["reward"] == pytest.approx(0.5)
    # another problems folder: its own reference decides
    other = tmp_path / "problems"
    other.mkdir()
    (other / "all_reduce.py").write_text("def solution(x):\n    return x * 2\n")
    mine = SweepConfig.model_validate({"problems_dir": str(other)})
    result = Result(sample_key="k", problem_id="all_reduce", model="m", sample_index=0, backend="torch",
                    status=Status.CORRECT, world_size=2, speedup=1.0, source="def solution(y):\n    return y * 2\n")
    assert answer(result, mine, cached=True)["reference_copy"] is True
