import torch
import torch.distributed as dist


@torch.no_grad()
def solution(x, layer, group):
    y = layer(x)
    dist.all_reduce(y, group=group)
    return {"sum": y, "rows": x.shape[0]}
