# An honest all-reduce that keeps a helper process of its own spinning on a core all the time (as a
# sample with a compile server or a logger might). Its calls share the machine with the helper, so
# it is slower; that is all: the helper is stopped with it while the reference runs, and nothing
# about its load looks like a forged time.
import multiprocessing

import torch
import torch.distributed as dist


def _spin():
    x = 0
    while True:
        x = (x * 31 + 7) % 1000003


multiprocessing.get_context("fork").Process(target=_spin, daemon=True).start()


def solution(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    dist.all_reduce(out)
    return out
