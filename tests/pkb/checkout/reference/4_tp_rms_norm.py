import torch
import torch.distributed as dist


@torch.no_grad()
def solution(x, weight):
    total = x.clone()
    dist.all_reduce(total)
    return total * torch.rsqrt(total.pow(2).mean(-1, keepdim=True) + 1e-6) * weight
