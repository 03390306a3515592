# expect: compile_error
# variant: does not parse (an unclosed bracket)
import torch
import torch.distributed as dist


def solution(x: torch.Tensor, root: int) -> torch.Tensor:
    out = x.clone(
    dist.reduce(out, dst=root)
    return out
