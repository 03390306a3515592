# Correct, but every call takes 1.5 s: each step of its evaluation stays inside a per-step limit,
# so only a deadline for the whole sample ends it (it would hold its gang for minutes otherwise).
import time

import torch
import torch.distributed as dist


def solution(x: torch.Tensor) -> torch.Tensor:
    time.sleep(1.5)
    out = x.clone()
    dist.all_reduce(out)
    return out
