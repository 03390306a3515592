# a ParallelKittens kernel: synchronises through a multicast barrier, built for 8 devices
SOURCE = r"""
#include "kittens.cuh"
using namespace kittens;
constexpr int NUM_DEVICES = 8;
using barrier = barrier_t<NUM_DEVICES>;
"""


def solution(tensor):
    raise RuntimeError("never launched on hardware without NVLink multicast")
