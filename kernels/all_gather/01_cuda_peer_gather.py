# expect: correct
# backend: cuda
# variant: all-gather in CUDA C++: each rank copies its shard into a symmetric buffer, then one kernel pulls every peer's shard over NVLink (16-byte loads when aligned)
"""All-gather by direct reads of the peers' symmetric buffers.

Per call, on the current stream: copy x into this rank's buffer; barrier; one kernel copies
shard r (read from rank r's buffer through its peer pointer) to out[r * n : (r + 1) * n] for
every r; barrier (no rank refills its buffer while a peer still reads it). Pure data movement,
so any dtype works: the kernel copies bytes.
"""

import torch
import torch.distributed as dist

from pkb_ray.cuda import load_cuda, symmetric_buffer

SOURCE = r"""
#include <cuda_runtime.h>
#include <stdint.h>

// out[r * bytes + i] = bufs[r][i], for every rank r; vec = 16 when every address and size allow.
__global__ void gather_peers(const char* const* bufs, int world, char* out, long bytes, int vec) {
    long stride = (long)gridDim.x * blockDim.x;
    long first = blockIdx.x * (long)blockDim.x + threadIdx.x;
    for (int r = 0; r < world; ++r) {
        const char* src = bufs[r];
        char* dst = out + r * bytes;
        if (vec == 16) {
            for (long i = first; i < bytes / 16; i += stride)
                reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
        } else {
            for (long i = first; i < bytes; i += stride) dst[i] = src[i];
        }
    }
}

extern "C" int gather_peers_launch(void* bufs, int world, void* out, long bytes, int vec, void* stream) {
    long units = vec == 16 ? bytes / 16 : bytes;
    long blocks = (units + 255) / 256;
    int grid = (int)(blocks < 1 ? 1 : (blocks > 1024 ? 1024 : blocks));
    gather_peers<<<grid, 256, 0, (cudaStream_t)stream>>>((const char* const*)bufs, world, (char*)out, bytes, vec);
    return (int)cudaGetLastError();
}
"""

lib = load_cuda(SOURCE, functions={"gather_peers_launch": ["ptr", "i32", "ptr", "i64", "i32", "stream"]})


def solution(x: torch.Tensor) -> torch.Tensor:
    world = dist.get_world_size()
    if not x.is_cuda:  # CPU runs (gloo): the reference's way
        out = x.new_empty(world * x.numel())
        dist.all_gather(list(out.chunk(world)), x.contiguous())
        return out
    buf, handle, ptrs = symmetric_buffer(x.numel(), x.dtype, x.device)
    buf.copy_(x.reshape(-1))
    handle.barrier(channel=0)
    out = x.new_empty(world * x.numel())
    nbytes = x.numel() * x.element_size()
    vec = 16 if nbytes % 16 == 0 and out.data_ptr() % 16 == 0 else 1
    err = lib.gather_peers_launch(ptrs.data_ptr(), world, out.data_ptr(), nbytes, vec,
                                  torch.cuda.current_stream().cuda_stream)
    if err:
        raise RuntimeError(f"gather_peers launch failed: cudaError {err}")
    handle.barrier(channel=0)
    return out
