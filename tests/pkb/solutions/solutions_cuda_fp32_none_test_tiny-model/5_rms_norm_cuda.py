# an older PKB name (rms_norm, now tp_rms_norm); writes the result into its input
import torch
import torch.distributed as dist


@torch.no_grad()
def solution(x, weight):
    dist.all_reduce(x)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight
