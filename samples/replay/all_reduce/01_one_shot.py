# expect: correct
# variant: one-shot all-reduce: gather every rank's buffer in one round, sum locally (fewer rounds than a ring: faster for small messages)
import torch
import torch.distributed as dist


def solution(x: torch.Tensor) -> torch.Tensor:
    w = dist.get_world_size()
    gathered = x.new_empty(w * x.numel())
    dist.all_gather_into_tensor(gathered, x.contiguous().view(-1))
    return gathered.view(w, *x.shape).sum(dim=0)
