# expect: correct
# variant: correct but slower: all-reduces the buffer in 16 separate chunks (16 x the latency)
import torch
import torch.distributed as dist


def solution(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    for chunk in out.chunk(16):
        dist.all_reduce(chunk)
    return out
