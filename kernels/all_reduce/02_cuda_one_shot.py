# expect: correct
# backend: cuda
# variant: one-shot all-reduce in CUDA C++ through pkb_ray.cuda.load_cuda: every rank reads all peers' symmetric buffers over NVLink (peer pointers) and sums them; device barriers from torch symmetric memory
"""All-reduce (sum) as one CUDA kernel that reads every peer's buffer directly.

The worked example of docs/writing-solutions.md. Per call, on the current stream:
1. copy x into this rank's symmetric buffer (allocated once, mapped into every peer);
2. barrier: every rank's copy is done before anyone reads;
3. the kernel: out[i] = sum over ranks r of buffer_r[i], reading peers through their pointers;
4. barrier: nobody overwrites its buffer (next call's step 1) while a peer still reads it.
One-shot moves (W-1) x N bytes into each GPU: the right shape for small messages.
"""

import torch
import torch.distributed as dist

from pkb_ray.cuda import load_cuda, symmetric_buffer

SOURCE = r"""
#include <cuda_runtime.h>
#include <cuda_bf16.h>

template <typename T>
__global__ void sum_peers(const T* const* bufs, int world, T* out, long n) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        float acc = 0.f;
        for (int r = 0; r < world; ++r) acc += static_cast<float>(bufs[r][i]);
        out[i] = static_cast<T>(acc);
    }
}

static int grid(long n) { long b = (n + 255) / 256; return (int)(b < 1024 ? (b > 0 ? b : 1) : 1024); }

extern "C" int sum_peers_f32(void* bufs, int world, void* out, long n, void* stream) {
    sum_peers<float><<<grid(n), 256, 0, (cudaStream_t)stream>>>((const float* const*)bufs, world, (float*)out, n);
    return (int)cudaGetLastError();
}

extern "C" int sum_peers_bf16(void* bufs, int world, void* out, long n, void* stream) {
    sum_peers<__nv_bfloat16><<<grid(n), 256, 0, (cudaStream_t)stream>>>(
        (const __nv_bfloat16* const*)bufs, world, (__nv_bfloat16*)out, n);
    return (int)cudaGetLastError();
}
"""

lib = load_cuda(SOURCE, functions={name: ["ptr", "i32", "ptr", "i64", "stream"]
                                   for name in ("sum_peers_f32", "sum_peers_bf16")})
LAUNCH = {torch.float32: lib.sum_peers_f32, torch.bfloat16: lib.sum_peers_bf16}
def solution(x: torch.Tensor) -> torch.Tensor:
    if not x.is_cuda or x.dtype not in LAUNCH:
        out = x.clone()  # CPU runs (gloo) and other dtypes: the reference's way
        dist.all_reduce(out)
        return out
    buf, handle, ptrs = symmetric_buffer(x.numel(), x.dtype, x.device)
    stream = torch.cuda.current_stream()
    buf.copy_(x.reshape(-1))
    handle.barrier(channel=0)
    out = torch.empty_like(x)
    err = LAUNCH[x.dtype](ptrs.data_ptr(), dist.get_world_size(), out.data_ptr(), x.numel(), stream.cuda_stream)
    if err:
        raise RuntimeError(f"sum_peers launch failed: cudaError {err}")
    handle.barrier(channel=0)
    return out
