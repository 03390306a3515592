"""The allowlisted sandbox and its own network on real GPUs (the device machine): NCCL, CUDA,
symmetric memory and the expert kernels still work, and a snooping sample still finds nothing.

Skipped without a CUDA GPU. With one GPU the ranks are W=1 (NCCL on one rank still bootstraps
over the sandbox's loopback and launches its kernels). Run there with
``python3 -m pytest -q -m gpu tests/test_sandbox_on_gpu.py``.
"""

import json
import statistics
from pathlib import Path

import pytest
import torch

from conftest import HOSTILE, REPO
from pkb_ray.evaluate.harness import Harness
from pkb_ray.generate.samples import read_samples
from pkb_ray.isolation import allowlist, sandbox
from pkb_ray.spec.config import EvalConfig, HardwareConfig
from pkb_ray.spec.names import Status
from pkb_ray.spec.schema import Sample
from test_sandbox_on_cpu import WALKER, outside_allowlist, run

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
W = min(2, torch.cuda.device_count()) if torch.cuda.is_available() else 0
# what runs at W=1 on a one-GPU machine (all_to_all's inputs need W >= 2)
KERNELS = ["01_symm_mem_two_shot.py", "02_cuda_one_shot.py", "04_triton_one_shot.py", "05_symm_mem_one_shot.py",
           "01_cuda_peer_gather.py", "01_cuda_peer_reduce.py"] + (["01_cuda_peer_push.py"] if W >= 2 else [])


@pytest.fixture(scope="module")
def harness(problems, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sandbox_gpu")
    hw = HardwareConfig(name=f"gpu_{W}", device="cuda", world_sizes=[W], gpus_per_node=W)
    cfg = EvalConfig(trials=2, timing_sets=2, warmup=3, rounds=20, size={"numel": 1 << 14}, timeout_s=120,
                     prewarm=0, max_round_calls=50)
    h = Harness([f"cuda:{i}" for i in range(W)], cfg, hw, problems, work_dir=tmp / "work", cache_dir=tmp / "cache")
    yield h, tmp
    h.close()


def test_a_gpu_sandbox_shows_only_the_allowlist():
    policy = sandbox.Policy(writable=[], hide=[], gpu=True)
    roots = allowlist.visible([], gpu=True)
    r = run(WALKER, policy, json.dumps([str(p) for p in roots]))
    assert outside_allowlist(r["readable"], roots, [], gpu=True) == []


def test_nccl_and_a_copy_run_in_the_sandboxs_own_network(harness, problems):
    # eager copies at 16 Ki elements and 20 rounds spread 0.81-1.04 at W=1 (docs/benchmarks/
    # interference.md) and one read 0.73 on 2026-12-02: the median of three is judged, not one
    h, _ = harness
    sample = Sample(problem_id="all_reduce", model="m", sample_index=0, source=problems["all_reduce"].source())
    speedups = []
    for _ in range(3):
        r = h.evaluate(sample)
        assert r.status == Status.CORRECT and r.isolation == "sandbox", r.message
        speedups.append(r.speedup)
    assert 0.8 <= statistics.median(speedups) <= 1.25, speedups


def test_a_snooping_sample_finds_nothing_on_gpu(harness, monkeypatch, tmp_path):
    h, _ = harness
    canary = Path.home() / ".pkb-canary-gpu"
    canary.write_text("canary-gpu")
    monkeypatch.setenv("PKB_TEST_SNOOP_FILES", f"{canary}:{REPO / '.git' / 'config'}")
    try:
        r = h.evaluate(Sample(problem_id="all_reduce", model="hostile", sample_index=0,
                              source=(HOSTILE / "snoops_on_host.py").read_text()))
    finally:
        canary.unlink(missing_ok=True)
    assert r.status == Status.CORRECT, r.message


@pytest.mark.parametrize("name", KERNELS)
def test_the_expert_kernels_stay_correct_in_the_sandbox(harness, problems, name):
    h, _ = harness
    row = next(r for r in read_samples(REPO / "kernels", model="kernels") if r["metadata"]["file"].endswith(name))
    # as the source stands (W=1 is below the problems' own minimum, which validation would refuse):
    # the rank builds its CUDA itself, nvcc inside the sandbox
    r = h.evaluate(Sample(problem_id=row["problem_id"], model="kernels", sample_index=0, source=row["source"]))
    assert r.status == Status.CORRECT, r.message
