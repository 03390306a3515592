"""What the trusted side sees, on real GPUs (the device machine), eager and as CUDA-graph replays:
the candidate's outputs and inputs read from its device memory by the clean rank (CUDA IPC) while
its processes are stopped, checks decided after each region, the trials' rules in timed calls,
and work after the rank's own clock counted by the parent's.

Skipped without a CUDA GPU; with one GPU the ranks are W=1 (NCCL on one rank still launches and
captures its kernels). The samples are the CPU suite's (tests/samples/), which run on NCCL as on
gloo. Run there with ``python3 -m pytest -q -m gpu tests/test_trust_on_gpu.py``.
"""

from pathlib import Path

import pytest
import torch

from conftest import HOSTILE
from pkb_ray.evaluate.harness import Harness
from pkb_ray.spec.config import EvalConfig, HardwareConfig
from pkb_ray.spec.names import Status
from pkb_ray.spec.schema import Sample

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
W = min(2, torch.cuda.device_count()) if torch.cuda.is_available() else 0
CASES = [  # sample, the status it must get, a phrase of its message
    ("answers_at_hand_over.py", Status.WRONG_OUTPUT, "timed call gave a wrong answer"),  # class 2
    ("cheats_after_early_checks.py", Status.WRONG_OUTPUT, "timed call gave a wrong answer"),  # class 5
    ("in_place_while_timed.py", Status.WRONG_OUTPUT, "shares memory with an input"),  # class 6
    ("writes_its_input_while_timed.py", Status.WRONG_OUTPUT, "changed by the call"),  # class 6
    # staged inputs said to lie in a decoy: on a GPU the decoy's memory is one its rank never exported
    # (the trusted side could not write there), which is tampering; where it could, the answers are wrong
    ("misdirects_staged_inputs.py", (Status.TAMPERING, Status.WRONG_OUTPUT),
     ("outside every device allocation", "timed call gave a wrong answer")),
    # outputs "where the last region said" before any said (a graph's replays may, once described)
    ("claims_as_before.py", Status.WRONG_OUTPUT, "0 tensors, expected 1"),
    # allocation sizes beside its IPC handles are checked against what the driver maps (issue 64)
    ("claims_a_larger_allocation.py", Status.TAMPERING, "less than the size its rank claimed"),
]


@pytest.fixture(scope="module", params=["eager", "graph"])
def harness(request, problems, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(f"trust_{request.param}")
    hw = HardwareConfig(name=f"gpu_{W}", device="cuda", world_sizes=[W], gpus_per_node=W)
    cfg = EvalConfig(trials=2, timing_sets=2, warmup=3, rounds=20, size={"numel": 1 << 20}, timeout_s=120,
                     prewarm=0, max_round_calls=50, timing_mode=request.param)
    h = Harness([f"cuda:{i}" for i in range(W)], cfg, hw, problems, work_dir=tmp / "work", cache_dir=tmp / "cache")
    yield h
    h.close()


def _sample(name: str) -> Sample:
    return Sample(problem_id="all_reduce", model="hostile", sample_index=0, source=(HOSTILE / name).read_text())


@pytest.mark.parametrize("name, status, needle", CASES)
def test_what_the_trusted_side_reads_catches_it(harness, name, status, needle):
    result = harness.evaluate(_sample(name))
    statuses, needles = (status, needle) if isinstance(status, tuple) else ((status,), (needle,))
    assert result.status in statuses, result.message
    assert needles[statuses.index(result.status)] in result.message, result.message


def test_work_after_the_runners_clock_is_counted_on_gpu(harness, problems):  # class 3
    result = harness.evaluate(_sample("works_in_a_hook.py"))
    copy = harness.evaluate(Sample(problem_id="all_reduce", model="m", sample_index=1,
                                   source=problems["all_reduce"].source()))
    assert copy.status == Status.CORRECT, copy.message
    assert result.status in (Status.CORRECT, Status.WRONG_OUTPUT), result.message
    if result.status == Status.CORRECT:  # its work was timed: no faster than an honest copy, by far
        assert result.speedup < 1.5 * copy.speedup, (result.speedup, copy.speedup)


def test_an_honest_copy_is_correct_and_times_at_one(harness, problems):
    source = problems["all_reduce"].source()
    speedups = []
    for index in range(3):
        result = harness.evaluate(Sample(problem_id="all_reduce", model="m", sample_index=index, source=source))
        assert result.status == Status.CORRECT, (index, speedups, result.status, result.message)
        speedups.append(result.speedup)
    assert 0.8 < sorted(speedups)[1] < 1.25, speedups
