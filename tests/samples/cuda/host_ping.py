# expect: correct
# variant: loads inline CUDA (a host-only function and a kernel), checks the library answers, then does the reference's work
import torch
import torch.distributed as dist

from pkb_ray.cuda import load_cuda

SOURCE = r"""
#include <cuda_runtime.h>

__global__ void scale(float* x, long n, float a) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}

extern "C" int ping() { return 42; }

extern "C" int launch_scale(void* x, long n, float a, void* stream) {
    scale<<<(n + 255) / 256, 256, 0, (cudaStream_t)stream>>>((float*)x, n, a);
    return (int)cudaGetLastError();
}
"""

lib = load_cuda(SOURCE, functions={"ping": [], "launch_scale": ["ptr", "i64", "f32", "stream"]})
assert lib.ping() == 42


def solution(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    dist.all_reduce(out)
    return out
