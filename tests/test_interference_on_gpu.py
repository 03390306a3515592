"""Samples that would slow the reference, on a real GPU (the device machine; W=1 with one GPU):
the reference is timed by the clean set with the sample's processes stopped, so none of them
gains a speedup (before issue 28 on 1 x H200: 13x, 13.5-15x and 2.1-7.6x). Skipped without CUDA.
Run there with ``python3 -m pytest -q -m gpu tests/test_interference_on_gpu.py``.
"""

import pytest
import torch

from conftest import HOSTILE
from pkb_ray.evaluate.harness import Harness
from pkb_ray.spec.config import EvalConfig, HardwareConfig
from pkb_ray.spec.names import Status
from pkb_ray.spec.schema import Sample

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
W = min(2, torch.cuda.device_count()) if torch.cuda.is_available() else 0


@pytest.fixture(scope="module", params=["eager", "graph"])
def harness(request, problems, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(f"interference_{request.param}")
    hw = HardwareConfig(name=f"gpu_{W}", device="cuda", world_sizes=[W], gpus_per_node=W, nvlink_multicast=False)
    cfg = EvalConfig(trials=2, timing_sets=2, warmup=5, rounds=50, timeout_s=30, prewarm=0, max_round_calls=200,
                     timing_mode=request.param)
    h = Harness([f"cuda:{i}" for i in range(W)], cfg, hw, problems, work_dir=tmp / "work", cache_dir=tmp / "cache")
    copy = h.evaluate(Sample(problem_id="all_reduce", model="m", sample_index=0, source=problems["all_reduce"].source()))
    assert copy.status == Status.CORRECT, copy.message
    yield h, copy.speedup
    h.close()


@pytest.mark.parametrize("name", ["slows_reference_in_cpp.py", "overrides_dispatcher.py", "patches_and_restores.py",
                                  "gpu/loads_gpu_when_idle.py"])
def test_no_reference_slowing_sample_gains_a_speedup(harness, name):
    h, honest = harness
    r = h.evaluate(Sample(problem_id="all_reduce", model="hostile", sample_index=1, source=(HOSTILE / name).read_text()))
    assert r.status in (Status.CORRECT, Status.TAMPERING, Status.TIMEOUT), r.message
    if r.status == Status.CORRECT:
        # eager reference copies at W=1 spread 0.92-1.13 (docs/benchmarks/interference.md), so two
        # honest evaluations can differ by ~1.23x; before the clean set, this class gained 11-15x
        assert r.speedup <= 1.3 * honest, (r.speedup, honest)


def test_a_stalling_sample_ends_at_its_deadline(harness):
    h, _ = harness
    if h.cfg.timing_mode == "graph":
        pytest.skip("its replays do not run the Python that stalls: it fits its deadline and is correct")
    r = h.evaluate(Sample(problem_id="all_reduce", model="hostile", sample_index=2,
                          source=(HOSTILE / "stalls_every_call.py").read_text()))
    assert r.status == Status.TIMEOUT and "deadline" in r.message, r.message
    assert r.eval_seconds < h.cfg.timeout_s + 30
