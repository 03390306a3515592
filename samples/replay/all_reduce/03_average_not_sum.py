# expect: wrong_output
# variant: wrong reduction: averages instead of summing
import torch
import torch.distributed as dist


def solution(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    dist.all_reduce(out)
    return out / dist.get_world_size()
