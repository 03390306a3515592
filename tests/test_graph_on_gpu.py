"""Graph timing mode on real GPUs (the device machine): what captures, what falls back, what is caught.

Skipped without a CUDA GPU. With one GPU the ranks are W=1 (NCCL on one rank still captures its
kernels); the expert kernel's case needs 2. Run there with
``python3 -m pytest -q -m gpu tests/test_graph_on_gpu.py``.
"""

from pathlib import Path

import pytest
import torch

from conftest import REPO
from pkb_ray.evaluate.harness import Harness
from pkb_ray.generate.samples import read_samples
from pkb_ray.pipeline.compile import build_settings
from pkb_ray.pipeline.wiring import prepare_here
from pkb_ray.spec.config import EvalConfig, HardwareConfig
from pkb_ray.spec.names import Status
from pkb_ray.spec.schema import Sample

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
W = min(2, torch.cuda.device_count()) if torch.cuda.is_available() else 0

SYNCS_THE_HOST = '''
import torch
import torch.distributed as dist

def solution(x):
    out = x.clone()
    dist.all_reduce(out)
    if out.abs().max().item() < 0:  # a host read: capture refuses it
        out.zero_()
    return out
'''

STALE = '''
import torch
import torch.distributed as dist

_kept = []

def solution(x):
    if not _kept:  # computes once, then hands back the same answer (and buffer)
        out = x.clone()
        dist.all_reduce(out)
        _kept.append(out)
    return _kept[0]
'''


def _harness(problems, tmp_path: Path, mode: str, numel: int = 1 << 16) -> Harness:
    hw = HardwareConfig(name=f"gpu_{W}", device="cuda", world_sizes=[W], gpus_per_node=W)
    cfg = EvalConfig(trials=2, timing_sets=2, warmup=5, rounds=30, size={"numel": numel}, timeout_s=120,
                     prewarm=0, max_round_calls=200, timing_mode=mode)
    return Harness([f"cuda:{i}" for i in range(W)], cfg, hw, problems, work_dir=tmp_path / "work",
                   cache_dir=tmp_path / "cache")


def _sample(source: str, index: int = 0) -> Sample:
    return Sample(problem_id="all_reduce", model="m", sample_index=index, source=source)


def _evaluate(problems, tmp_path: Path, mode: str, sample, **size):
    h = _harness(problems, tmp_path, mode, **size)
    try:
        return h.evaluate(sample)
    finally:
        h.close()


def test_nccl_reference_and_its_copy_capture_and_time_alike(problems, tmp_path):
    r = _evaluate(problems, tmp_path, "both", _sample(problems["all_reduce"].source()))
    assert r.status == Status.CORRECT, r.message
    assert r.timing_mode == "graph" and r.graph_error == "", r.graph_error
    assert r.graph_cand_time_us == r.cand_time_us and r.eager_cand_time_us > 0
    assert 0.8 <= r.speedup <= 1.25, r.speedup  # a copy of the reference, replayed


def test_a_sample_that_syncs_the_host_falls_back_to_eager_with_the_reason(problems, tmp_path):
    r = _evaluate(problems, tmp_path, "graph", _sample(SYNCS_THE_HOST))
    assert r.status == Status.CORRECT, r.message
    assert r.timing_mode == "eager" and "candidate not captured" in r.graph_error, r.graph_error
    assert r.cand_time_us > 0


def test_a_stale_answer_is_caught_in_graph_mode_too(problems, tmp_path):
    r = _evaluate(problems, tmp_path, "graph", _sample(STALE))
    assert r.status == Status.WRONG_OUTPUT, (r.status, r.message)


@pytest.mark.skipif(W < 2, reason="the expert kernel needs 2 GPUs")
def test_the_expert_all_reduce_captures_its_symmetric_memory_kernel(problems, tmp_path):
    row = next(r for r in read_samples(REPO / "kernels", model="kernels")
               if r["metadata"]["file"].endswith("03_cuda_one_or_two_shot.py"))
    sample = prepare_here(row, problems, W, build_settings("sm_90a", tmp_path / "cache", 300))
    assert isinstance(sample, Sample), sample.message
    r = _evaluate(problems, tmp_path, "both", sample, numel=1 << 14)
    assert r.status == Status.CORRECT, r.message
    assert r.timing_mode == "graph" and r.graph_error == "", r.graph_error
    assert r.graph_cand_time_us > 0 and r.eager_cand_time_us > 0
