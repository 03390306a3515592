# right: the layer's output summed over the group the builder made (inputs: a tensor, a module, a group)
import torch
import torch.distributed as dist


@torch.no_grad()
def solution(x, layer, group):
    y = torch.nn.functional.linear(x, layer.weight, layer.bias)
    dist.all_reduce(y, group=group)
    return {"rows": x.shape[0], "sum": y}
