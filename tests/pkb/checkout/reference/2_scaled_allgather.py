import torch
import torch.distributed as dist


def solution(x, scale):
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x * scale)
    return torch.cat(parts)
