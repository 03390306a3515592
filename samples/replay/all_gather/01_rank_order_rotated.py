# expect: wrong_output
# variant: off-by-one: places rank r's shard at slot r+1 (mod W)
import torch
import torch.distributed as dist


def solution(x: torch.Tensor) -> torch.Tensor:
    w = dist.get_world_size()
    parts = [torch.empty_like(x) for _ in range(w)]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts[-1:] + parts[:-1])
