# right values in float64: PKB's rule (no dtype check) passes it, pkb_ray's does not
import torch
import torch.distributed as dist


@torch.no_grad()
def solution(x, layer, group):
    y = layer(x)
    dist.all_reduce(y, group=group)
    return {"sum": y.double(), "rows": x.shape[0]}
