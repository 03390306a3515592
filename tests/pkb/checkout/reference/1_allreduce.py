import torch
import torch.distributed as dist


@torch.no_grad()
def solution(x):
    out = x.clone()
    dist.all_reduce(out)
    return out
