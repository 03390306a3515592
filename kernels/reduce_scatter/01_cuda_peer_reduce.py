# expect: correct
# backend: cuda
# variant: reduce-scatter as one CUDA kernel per call: each rank copies its input into a symmetric buffer, then (after a per-block barrier on the signal pads) sums its own chunk of every peer's buffer over NVLink with 16-byte loads
"""Reduce-scatter (sum) by direct reads of the peers' symmetric buffers, one kernel per call.

In the kernel: block b copies its share of every chunk of x into this rank's symmetric buffer
(the same share of each chunk, so that the next phase needs no wider barrier); barrier with
block b of every peer (``pkb::block_barrier``); block b sums its share of chunk ``rank`` over
every rank's buffer (ranks in order, in float) into out; barrier (nobody refills its buffer while
a peer still reads it). (W-1)/W of the input comes in over NVLink. Sizes that are not a multiple
of 16 bytes per chunk take the reference's way.
"""

import torch
import torch.distributed as dist

from pkb_ray.cuda import load_cuda, signal_pads, symmetric_buffer

_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

SOURCE = r"""
#include <cuda_bf16.h>
#include <pkb_ray/peer.cuh>

template <typename T>
__global__ void reduce_chunk(const T* x, T* const* bufs, uint32_t* const* pads, T* out, long chunk, int rank,
                             int world) {
    const long stride = (long)gridDim.x * blockDim.x, first = blockIdx.x * (long)blockDim.x + threadIdx.x;
    const long packs = chunk / pkb::Pack<T>::n;
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    uint4* mine = reinterpret_cast<uint4*>(bufs[rank]);
    for (int c = 0; c < world; ++c)
        for (long i = first; i < packs; i += stride) mine[c * packs + i] = xv[c * packs + i];
    pkb::block_barrier(pads, rank, world);
    uint4* outv = reinterpret_cast<uint4*>(out);
    for (long i = first; i < packs; i += stride) outv[i] = pkb::sum_packs<T>(bufs, world, rank * packs + i);
    pkb::block_barrier(pads, rank, world);
}

template <typename T>
static int launch(void* x, void* bufs, void* pads, void* out, long chunk, int rank, int world, int max_blocks,
                  void* stream) {
    long blocks = (chunk / pkb::Pack<T>::n + 511) / 512;
    blocks = blocks < 1 ? 1 : (blocks > max_blocks ? max_blocks : blocks);
    reduce_chunk<T><<<(int)blocks, 512, 0, (cudaStream_t)stream>>>((const T*)x, (T* const*)bufs,
                                                                    (uint32_t* const*)pads, (T*)out, chunk, rank,
                                                                    world);
    return (int)cudaGetLastError();
}

extern "C" int reduce_chunk_f32(void* x, void* bufs, void* pads, void* out, long chunk, int rank, int world,
                                int max_blocks, void* stream) {
    return launch<float>(x, bufs, pads, out, chunk, rank, world, max_blocks, stream);
}

extern "C" int reduce_chunk_bf16(void* x, void* bufs, void* pads, void* out, long chunk, int rank, int world,
                                 int max_blocks, void* stream) {
    return launch<__nv_bfloat16>(x, bufs, pads, out, chunk, rank, world, max_blocks, stream);
}
"""

ARGS = ["ptr", "ptr", "ptr", "ptr", "i64", "i32", "i32", "i32", "stream"]
lib = load_cuda(SOURCE, functions={"reduce_chunk_f32": ARGS, "reduce_chunk_bf16": ARGS})
LAUNCH = {torch.float32: lib.reduce_chunk_f32, torch.bfloat16: lib.reduce_chunk_bf16}
MAX_BLOCKS = 264  # two blocks of 512 threads per SM of an H100/H200 (132 SMs)
_raw_stream = torch._C._cuda_getCurrentRawStream if torch.cuda.is_available() else None
_plans: dict = {}  # (device, dtype, numel) -> what stays the same from call to call (small calls are host-bound)


def _plan(x: torch.Tensor) -> tuple:
    world, rank = dist.get_world_size(), dist.get_rank()
    buf, handle, ptrs = symmetric_buffer(x.numel(), x.dtype, x.device)  # collective: first call of a shape
    pads, slots = signal_pads(handle, x.device)
    return (LAUNCH[x.dtype], ptrs.data_ptr(), pads.data_ptr(), x.numel() // world, rank, world,
            min(MAX_BLOCKS, slots // world), x.device.index)


def solution(x: torch.Tensor) -> torch.Tensor:
    world = dist.get_world_size()
    chunk = x.numel() // world
    if not x.is_cuda or x.dtype not in LAUNCH or chunk == 0 or (chunk * x.element_size()) % 16:
        out = x.new_empty(chunk)  # CPU runs (gloo), other dtypes and odd sizes: the reference's way
        _reduce_scatter(out, x.contiguous())
        return out
    if not x.is_contiguous() or x.data_ptr() % 16:
        x = x.clone(memory_format=torch.contiguous_format)  # the kernel loads 16 aligned bytes at a time
    key = (x.device, x.dtype, x.numel())
    if key not in _plans:
        _plans[key] = _plan(x)
    launch, ptrs, pads, chunk, rank, world, blocks, device = _plans[key]
    out = x.new_empty(chunk)
    err = launch(x.data_ptr(), ptrs, pads, out.data_ptr(), chunk, rank, world, blocks, _raw_stream(device))
    if err:
        raise RuntimeError(f"reduce_chunk launch failed: cudaError {err}")
    return out
