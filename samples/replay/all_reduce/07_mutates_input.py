# expect: wrong_output
# variant: reduces in place into the caller's input and returns it (saves a copy, clobbers the input)
import torch
import torch.distributed as dist


def solution(x: torch.Tensor) -> torch.Tensor:
    dist.all_reduce(x)
    return x
