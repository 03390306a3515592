# expect: wrong_output
# variant: computes once and returns the cached answer afterwards (fast, and wrong on new inputs)
import torch
import torch.distributed as dist

_cache = {}


def solution(x: torch.Tensor) -> torch.Tensor:
    if "out" not in _cache:
        out = x.clone()
        dist.all_reduce(out)
        _cache["out"] = out
    return _cache["out"].clone()
