# expect: crash
# variant: rank 1 kills its own process (os._exit), as a fatal CUDA error or abort would
import os

import torch
import torch.distributed as dist


def solution(x: torch.Tensor, root: int) -> torch.Tensor:
    if dist.get_rank() == 1:
        os._exit(3)
    out = x.clone()
    dist.broadcast(out, src=root)
    return out
