# Right for the first calls (the trials), then returns its first answer again: only the check of
# timed outputs catches it.
import torch
import torch.distributed as dist

_state = {"calls": 0}


def solution(x: torch.Tensor) -> torch.Tensor:
    _state["calls"] += 1
    if _state["calls"] > 2 and "out" in _state:
        return _state["out"].clone()
    out = x.clone()
    dist.all_reduce(out)
    _state["out"] = out
    return out
