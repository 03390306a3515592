# Right in the trials, then spins forever once the timed iterations start.
import torch
import torch.distributed as dist

_state = {"calls": 0}


def solution(x: torch.Tensor) -> torch.Tensor:
    _state["calls"] += 1
    if _state["calls"] > 3:
        while True:
            pass
    out = x.clone()
    dist.all_reduce(out)
    return out
