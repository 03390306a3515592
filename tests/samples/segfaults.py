# Dereferences a null pointer on rank 0 (what an illegal memory access does to a process).
import ctypes

import torch
import torch.distributed as dist


def solution(x: torch.Tensor) -> torch.Tensor:
    if dist.get_rank() == 0:
        ctypes.string_at(0)
    out = x.clone()
    dist.all_reduce(out)
    return out
