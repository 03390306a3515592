# An honest all-reduce that allocates, fills and drops 64 MiB on every call (heavy memory traffic
# and page faults inside its own calls): slower, and correct.
import torch
import torch.distributed as dist


def solution(x: torch.Tensor) -> torch.Tensor:
    scratch = torch.empty(16 << 20)  # 64 MiB of float32
    scratch.fill_(1.0)
    out = x.clone() + (scratch[:1] - 1.0)
    dist.all_reduce(out)
    return out
