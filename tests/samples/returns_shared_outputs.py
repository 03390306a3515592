# Returns each answer in memory that other processes can map (a tensor over a MAP_SHARED file of
# /dev/shm): any rank could have written another's output there without communicating. The trusted
# side reads a candidate's outputs only where no other process maps them: tampering.
import mmap
import os

import torch
import torch.distributed as dist

_maps = []


def solution(x: torch.Tensor) -> torch.Tensor:
    nbytes = x.numel() * x.element_size()
    fd = os.open(f"/dev/shm/out-{dist.get_rank()}-{len(_maps)}", os.O_RDWR | os.O_CREAT, 0o600)
    os.ftruncate(fd, nbytes)
    buf = mmap.mmap(fd, nbytes, mmap.MAP_SHARED)
    os.close(fd)
    _maps.append(buf)
    out = torch.frombuffer(buf, dtype=x.dtype).view_as(x)
    out.copy_(x)
    dist.all_reduce(out)
    return out
