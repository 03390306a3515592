# Sends SIGKILL to every process it may signal (kill(-1)): in its sandbox that is its own set only,
# so it crashes alone; the zygote that forked it, the evaluator and the next sample go on.
import os
import signal

import torch
import torch.distributed as dist

os.kill(-1, signal.SIGKILL)


def solution(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    dist.all_reduce(out)
    return out
