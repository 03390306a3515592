# expect: invalid_sample
# variant: drops the root parameter the reference takes
import torch
import torch.distributed as dist


def solution(x: torch.Tensor) -> torch.Tensor:
    w = dist.get_world_size()
    out = x.new_empty(x.numel() // w)
    dist.scatter(out, list(x.chunk(w)) if dist.get_rank() == 0 else None, src=0)
    return out
