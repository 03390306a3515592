# expect: timeout
# variant: rank 1 never reaches the collective (a missing branch): rank 0 waits forever
import time

import torch
import torch.distributed as dist


def solution(x: torch.Tensor) -> torch.Tensor:
    if dist.get_rank() == 1:
        while True:
            time.sleep(0.1)
    out = x.clone()
    dist.all_reduce(out)
    return out
