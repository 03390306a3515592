# expect: runtime_error
# variant: asks for a 4 TiB buffer on the GPU (far beyond its memory): torch.OutOfMemoryError propagates
import torch
import torch.distributed as dist


def solution(x: torch.Tensor) -> torch.Tensor:
    if x.is_cuda:
        # torch.OutOfMemoryError is a RuntimeError: the allocator refuses up front, nothing is launched.
        torch.empty(1 << 42, dtype=torch.uint8, device=x.device)
    out = x.clone()
    dist.all_reduce(out)
    return out
