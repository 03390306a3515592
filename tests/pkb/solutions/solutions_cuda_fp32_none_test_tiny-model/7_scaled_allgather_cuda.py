# right, but numbered after another problem (PKB renumbered): matched by its name
import torch
import torch.distributed as dist


def solution(x, scale):
    out = torch.empty((dist.get_world_size() * x.shape[0], x.shape[1]), dtype=x.dtype, device=x.device)
    dist.all_gather_into_tensor(out, (x * scale).contiguous()) if x.device.type == "cuda" else \
        dist.all_gather(list(out.chunk(dist.get_world_size())), x * scale)
    return out
