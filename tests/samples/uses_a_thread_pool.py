# Honest: copies its input in chunks on a pool of threads (started lazily inside its calls, as
# ThreadPoolExecutor does), then all-reduces. Threads come and go while it runs: none while its set
# is stopped, so the freezer's proof (which counts threads born since) has nothing to say.
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.distributed as dist

_pool = ThreadPoolExecutor(max_workers=4)


def solution(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    chunks = list(zip(out.chunk(4), x.chunk(4)))
    list(_pool.map(lambda pair: pair[0].copy_(pair[1]), chunks))
    dist.all_reduce(out)
    return out
