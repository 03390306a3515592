# Honest: part of its call compiled with torch.compile, as people write samples. Inductor compiles
# at the first call, on the rank, in the sample's own scratch (~25 s cold on 2 CPU cores, more than
# eval.timeout_s on CPU): its budget grows by eval.torch_compile_timeout_s, and the compiling is
# the trials' and warm-up's, never the timed calls'.
import torch
import torch.distributed as dist


@torch.compile
def _prepare(x: torch.Tensor) -> torch.Tensor:
    return x * 1.0


def solution(x: torch.Tensor) -> torch.Tensor:
    out = _prepare(x)
    dist.all_reduce(out)
    return out
