# expect: compile_error
# backend: cuda
# variant: the CUDA source uses an undeclared identifier: nvcc's message must reach the result
import torch

from pkb_ray.cuda import load_cuda

KERNEL = """
__global__ void k(float* x) { x[threadIdx.x] = undeclared_value; }
"""
LAUNCHER = """
extern "C" int go(void* x) { k<<<1, 32>>>((float*)x); return 0; }
"""
lib = load_cuda(KERNEL + LAUNCHER, functions={"go": ["ptr"]})


def solution(x: torch.Tensor) -> torch.Tensor:
    return x.clone()
