"""Every problem's reference with NCCL on 2 GPUs agrees with its oracle, in each of its dtypes.

Skipped without 2 CUDA GPUs. On the device machine: ``python3 -m pytest -q -m gpu tests/test_problems_on_gpu.py``.
"""

import pytest
import torch

from pkb_ray.problem import load_problems
from pkb_ray.problems.check import check

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                                                  reason="needs 2 CUDA GPUs")]
ALL = load_problems()
DTYPES = sorted({d for p in ALL.values() for d in p.meta.dtypes})


@pytest.mark.parametrize("dtype", DTYPES)
def test_references_agree_with_their_oracles_on_two_gpus(dtype):
    ids = sorted(pid for pid, p in ALL.items() if dtype in p.meta.dtypes)
    failures = check(ALL, ids, 2, presets=("small",), seeds=(0, 1), dtype=dtype, device="cuda")
    assert not failures, "\n".join(f"{k}: {v[-1500:]}" for k, v in failures.items())
