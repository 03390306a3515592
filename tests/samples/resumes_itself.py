# An honest all-reduce with two helper processes that keep sending SIGCONT to every process they
# can signal (its own ranks included) and spin in between: were the freezer to stop processes one
# by one and believe them stopped, they would resume each other and the ranks, and load the cores
# while the reference is timed.
import multiprocessing
import os
import signal

import torch
import torch.distributed as dist


def _resume_everything():
    x = 0
    while True:
        try:
            os.kill(-1, signal.SIGCONT)
        except OSError:
            pass
        for _ in range(2000):
            x = (x * 31 + 7) % 1000003


for _ in range(2):
    multiprocessing.get_context("fork").Process(target=_resume_everything, daemon=True).start()


def solution(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    dist.all_reduce(out)
    return out
