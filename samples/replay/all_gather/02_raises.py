# expect: runtime_error
# variant: a shape bug that raises on every rank
import torch
import torch.distributed as dist


def solution(x: torch.Tensor) -> torch.Tensor:
    w = dist.get_world_size()
    out = x.new_empty(w * x.numel())
    return out.view(w, -1, 3)
