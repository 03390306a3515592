# expect: unsupported_hardware
# backend: parallelkittens
# variant: a ParallelKittens all-reduce that synchronises through an NVLink multicast barrier: refused before anything is built or launched on hardware without multicast
import torch
import torch.distributed as dist

KERNEL = r"""
#include "kittens.cuh"
constexpr int NUM_DEVICES = 2;
using barrier = kittens::barrier_t<NUM_DEVICES>;
"""


def solution(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    dist.all_reduce(out)
    return out
