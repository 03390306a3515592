# expect: wrong_output
# variant: right values, wrong dtype: accumulates and returns float64
import torch
import torch.distributed as dist


def solution(x: torch.Tensor) -> torch.Tensor:
    out = x.to(torch.float64)
    dist.all_reduce(out)
    return out
