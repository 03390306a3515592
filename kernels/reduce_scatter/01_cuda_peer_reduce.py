# expect: correct
# backend: cuda
# variant: reduce-scatter in CUDA C++: inputs copied into symmetric buffers, then each rank sums its own chunk across every peer's buffer over NVLink (float accumulation)
"""Reduce-scatter by direct reads: rank k sums chunk k of every rank's input.

Per call, on the current stream: copy x (W chunks of n) into this rank's symmetric buffer;
barrier; one kernel computes out[i] = sum over r of buffer_r[k * n + i] (k = this rank),
accumulating in float; barrier. Each rank reads (W - 1) chunks from peers: the same bytes over
NVLink as a ring, without its W - 1 dependent steps.
"""

import torch
import torch.distributed as dist

from pkb_ray.cuda import load_cuda, symmetric_buffer

SOURCE = r"""
#include <cuda_runtime.h>
#include <cuda_bf16.h>

template <typename T>
__global__ void reduce_chunk(const T* const* bufs, int world, int rank, T* out, long chunk) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < chunk; i += (long)gridDim.x * blockDim.x) {
        float acc = 0.f;
        for (int r = 0; r < world; ++r) acc += static_cast<float>(bufs[r][rank * chunk + i]);
        out[i] = static_cast<T>(acc);
    }
}

static int grid(long n) { long b = (n + 255) / 256; return (int)(b < 1 ? 1 : (b > 1024 ? 1024 : b)); }

extern "C" int reduce_chunk_f32(void* bufs, int world, int rank, void* out, long chunk, void* stream) {
    reduce_chunk<float><<<grid(chunk), 256, 0, (cudaStream_t)stream>>>((const float* const*)bufs, world, rank,
                                                                     (float*)out, chunk);
    return (int)cudaGetLastError();
}

extern "C" int reduce_chunk_bf16(void* bufs, int world, int rank, void* out, long chunk, void* stream) {
    reduce_chunk<__nv_bfloat16><<<grid(chunk), 256, 0, (cudaStream_t)stream>>>(
        (const __nv_bfloat16* const*)bufs, world, rank, (__nv_bfloat16*)out, chunk);
    return (int)cudaGetLastError();
}
"""

lib = load_cuda(SOURCE, functions={name: ["ptr", "i32", "i32", "ptr", "i64", "stream"]
                                   for name in ("reduce_chunk_f32", "reduce_chunk_bf16")})
LAUNCH = {torch.float32: lib.reduce_chunk_f32, torch.bfloat16: lib.reduce_chunk_bf16}


def solution(x: torch.Tensor) -> torch.Tensor:
    world, rank = dist.get_world_size(), dist.get_rank()
    chunk = x.numel() // world
    if not x.is_cuda or x.dtype not in LAUNCH:  # CPU runs (gloo) and other dtypes: the reference's way
        out = x.new_empty(chunk)
        (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(out, x.contiguous())
        return out
    buf, handle, ptrs = symmetric_buffer(x.numel(), x.dtype, x.device)
    buf.copy_(x.reshape(-1))
    handle.barrier(channel=0)
    out = x.new_empty(chunk)
    err = LAUNCH[x.dtype](ptrs.data_ptr(), world, rank, out.data_ptr(), chunk, torch.cuda.current_stream().cuda_stream)
    if err:
        raise RuntimeError(f"reduce_chunk launch failed: cudaError {err}")
    handle.barrier(channel=0)
    return out
