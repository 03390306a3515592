# Right through the trials; in timed calls it reduces into a copy as it should, then uses its input
# as scratch (zeroes it): no output shares memory with an input, but the input changed, which the
# reference never does. Its inputs are read after the call by the trusted side and compared, in
# timed calls as in trials.
import torch
import torch.distributed as dist

_state = {"calls": 0}


def solution(x: torch.Tensor) -> torch.Tensor:
    _state["calls"] += 1
    out = x.clone()
    dist.all_reduce(out)
    if _state["calls"] > 2:
        x.zero_()
    return out
