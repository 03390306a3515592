"""The expert kernels on real GPUs (the device machine): correct at every path they take.

Skipped without 2 CUDA GPUs. Run there with ``python3 -m pytest -q -m gpu tests/test_kernels_on_gpu.py``.
Sizes pick the kernels' paths: all-reduce 16 KiB (one-shot) and 4 MiB (two-shot), all-gather and
reduce-scatter with 16-byte and byte-wise copies, all-to-all with one and several 16 MiB rounds
per pair; float32 and bfloat16. ``PKB_KERNELS=a.py,b.py`` limits a run to those kernel files.
"""

import os
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

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                                                  reason="needs 2 CUDA GPUs")]
W = 2
KERNELS = read_samples(REPO / "kernels", model="kernels")
ONLY = {f for f in os.environ.get("PKB_KERNELS", "").split(",") if f}
SIZES = {  # problem -> (knobs, dtype) to run every kernel of that problem at
    "all_reduce": [({"numel": 4096}, "float32"), ({"numel": 1 << 20}, "float32"), ({"numel": 1001}, "float32"),
                   ({"numel": 1 << 20}, "bfloat16")],
    "all_gather": [({"numel": 4096}, "float32"), ({"numel": 1 << 20}, "float32"), ({"numel": 1001}, "float32"),
                   ({"numel": 1 << 20}, "bfloat16")],
    "reduce_scatter": [({"numel": 4096}, "float32"), ({"numel": 1 << 20}, "float32"), ({"numel": 1001}, "float32"),
                       ({"numel": 1 << 20}, "bfloat16")],
    "all_to_all": [({"rows_per_peer": 8, "dim": 128}, "float32"), ({"rows_per_peer": 64, "dim": 4096}, "float32"),
                   ({"rows_per_peer": 1500, "dim": 4096}, "float32"), ({"rows_per_peer": 5, "dim": 3}, "float32"),
                   ({"rows_per_peer": 64, "dim": 4096}, "bfloat16")],
}
CASES = [(pid, knobs, dtype) for pid, runs in SIZES.items() for knobs, dtype in runs]


@pytest.mark.parametrize("pid,knobs,dtype", CASES,
                         ids=[f"{p}-{'-'.join(map(str, k.values()))}-{d}" for p, k, d in CASES])
def test_expert_kernels_are_correct_on_gpus(pid, knobs, dtype, problems, tmp_path: Path):
    rows = [r for r in KERNELS if r["problem_id"] == pid]
    assert rows, f"no expert kernel for {pid}"
    rows = [r for r in rows if not ONLY or Path(r["metadata"]["file"]).name in ONLY]
    if not rows:
        pytest.skip(f"PKB_KERNELS leaves no kernel of {pid}")
    hw = HardwareConfig(name="gpu_2", device="cuda", world_sizes=[W], gpus_per_node=W)
    cfg = EvalConfig(trials=3, timing_sets=2, warmup=3, rounds=5, size=knobs, dtype=dtype, timeout_s=60, prewarm=2,
                     max_round_calls=50)
    harness = Harness([f"cuda:{i}" for i in range(W)], cfg, hw, problems, work_dir=tmp_path / "work",
                      cache_dir=tmp_path / "cache")
    settings = build_settings(hw.arch, tmp_path / "cache", 300)
    got = {}
    try:
        for row in rows:
            sample = prepare_here(row, problems, W, settings)
            assert isinstance(sample, Sample), sample.message
            result = harness.evaluate(sample)
            got[row["metadata"]["file"]] = (result.status, result.cand_time_us, result.message[-400:])
    finally:
        harness.close()
    bad = {k: v for k, v in got.items() if v[0] != Status.CORRECT or not v[1]}
    assert not bad, bad
