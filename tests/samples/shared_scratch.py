# Honest: stages each input through a scratch buffer in shared memory (as a shared-memory transport
# might) and returns a result in ordinary memory. Only where a tensor the trusted side writes or
# reads lies matters: this one is correct.
import mmap

import torch
import torch.distributed as dist

_scratch: dict[int, mmap.mmap] = {}


def solution(x: torch.Tensor) -> torch.Tensor:
    nbytes = x.numel() * x.element_size()
    if nbytes not in _scratch:
        _scratch[nbytes] = mmap.mmap(-1, nbytes, mmap.MAP_SHARED)  # anonymous shared memory
    scratch = torch.frombuffer(_scratch[nbytes], dtype=x.dtype).view_as(x)
    scratch.copy_(x)
    out = scratch.clone()
    dist.all_reduce(out)
    return out
