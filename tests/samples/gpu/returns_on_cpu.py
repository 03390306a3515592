# expect: wrong_output
# variant: the right values, returned on the CPU for GPU inputs
import torch
import torch.distributed as dist


def solution(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    dist.all_reduce(out)
    return out.cpu() if x.is_cuda else out
